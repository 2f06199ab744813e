//! The `streamc` command line. Diagnostics are rendered here and nowhere else.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

// glibc's allocator spends much of a run consolidating small blocks; mimalloc does not. Built
// without transparent huge pages (Cargo feature `no_thp`): with them every region mimalloc
// touched was resident in 2 MiB pages, and a `stats.stream` run over 1 M trades peaked at 124 MB
// instead of 82 MB for the same CPU time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use streamc::diag::{self, RenderOptions};
use streamc::explain::{self, ExplainFormat};
use streamc::record::Start;
use streamc::{config, hir, plan};

mod control_cli;
mod dlq_cli;
mod fmt_cli;
mod test_cli;
mod trace_cli;

#[derive(Parser)]
#[command(name = "streamc", version, about = "A stream processor for a small declarative language")]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// `streamc control`'s statement: the argument, or read from a file or standard input (`-`).
fn read_statement(arg: Option<String>, file: Option<PathBuf>) -> Result<String, String> {
    let from_stdin = || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("cannot read the statement from standard input: {e}"))?;
        Ok(text)
    };
    match (arg, file) {
        (Some(s), _) if s == "-" => from_stdin(),
        (Some(s), _) => Ok(s),
        (None, Some(f)) if f.as_os_str() == "-" => from_stdin(),
        (None, Some(f)) => {
            std::fs::read_to_string(&f).map_err(|e| format!("cannot read the statement from {}: {e}", f.display()))
        }
        (None, None) => Err("no statement: give it as an argument, or with -f FILE (`-`: standard input)".into()),
    }
}

/// Options every subcommand takes.
#[derive(Args)]
struct Global {
    /// YAML configuration file (repeatable: each file's keys over the earlier ones', so that
    /// credentials can live in a file of their own).
    #[arg(long, global = true, value_name = "FILE")]
    config: Vec<PathBuf>,
    /// Override a configuration key (repeatable), e.g. `--set commit.records=1000`.
    #[arg(long = "set", global = true, value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Short for `--set kafka.bootstrap.servers=X`.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    bootstrap_servers: Option<String>,
    /// Holds the embedded log and local state.
    #[arg(long, global = true, value_name = "DIR", default_value = ".streamc")]
    state_dir: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Check programs and report every problem found.
    Check {
        /// Program files (`.stream`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also check a control statement against the (single) program.
        #[arg(long, value_name = "TEXT")]
        statement: Option<String>,
    },
    /// Rewrite program files in the canonical layout (idempotent; comments and tokens kept).
    Fmt {
        /// Program files (`.stream`); `-` formats standard input to standard output.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Change nothing: print a diff for each file that is not formatted and exit with 1.
        #[arg(long)]
        check: bool,
    },
    /// Serve the Language Server Protocol on standard input and output, for editors: diagnostics,
    /// hover types, go to definition, completion, formatting (see editor/README.md).
    Lsp,
    /// Print the processor DAG: sub-topologies, processors, stores, changelog and repartition topics.
    Explain {
        /// The program file.
        file: PathBuf,
        /// Only this query.
        #[arg(long)]
        query: Option<String>,
        /// text for reading, dot (Graphviz) or mermaid for a picture, json for tools.
        #[arg(long, value_enum, default_value_t = ExplainFormat::Text)]
        format: ExplainFormat,
    },
    /// Run a program (on the embedded log in the state directory).
    Run {
        /// The program file.
        file: PathBuf,
        /// Append a file's lines (JSON values) to a topic before processing: TOPIC=FILE.
        /// Resumable: a re-run appends only lines added since.
        #[arg(long = "input", value_name = "TOPIC=FILE")]
        inputs: Vec<String>,
        /// Exit once every input partition has been processed up to its end at start-up.
        #[arg(long)]
        drain: bool,
        /// At the end, advance stream time past every window so `emit final` flushes them all.
        #[arg(long)]
        close_windows_at_end: bool,
        /// Worker threads; tasks are spread over them.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        threads: u16,
        /// Serve HTTP on HOST:PORT while the run goes on: Prometheus metrics at /metrics, the
        /// probes /healthz (liveness) and /ready (partitions assigned and restored, not stopping).
        #[arg(long, value_name = "HOST:PORT", visible_alias = "metrics-addr")]
        http_addr: Option<String>,
        /// Inject faults (for testing): seed=S,redeliver=P,fail=P — P per input record of a
        /// redelivery, P per commit step of a task failure. Results must not change.
        #[arg(long, value_name = "SPEC", value_parser = |s: &str| s.parse::<streamc::runtime::chaos::ChaosSpec>())]
        chaos: Option<streamc::runtime::chaos::ChaosSpec>,
        /// Start the application over: delete its changelog and repartition topics, its
        /// committed positions and its local state, then process the input from the start. The
        /// control log is kept (its statements apply again). Stop every instance first.
        #[arg(long)]
        reset: bool,
    },
    /// Run a program on fixtures (YAML: input records per topic, expected outputs) on a fresh
    /// embedded log each, and print what differs; exit code 1 if any fixture fails.
    Test {
        /// The program.
        program: PathBuf,
        /// Fixture files (see docs/conventions.md, "Fixtures").
        #[arg(required = true)]
        fixtures: Vec<PathBuf>,
    },
    /// Append records to a topic: one JSON value per line (or an envelope with --envelope).
    Produce {
        /// The topic to append to (created if missing).
        topic: String,
        /// A file of lines, or `-` (the default) for standard input.
        file: Option<PathBuf>,
        /// Each line is {"key": …, "value": … | null, "timestamp": ms, "headers": {…}}; a header
        /// value that is not UTF-8 is written {"hex": "…"}.
        #[arg(long)]
        envelope: bool,
        /// Take keys and timestamps from this program's declaration of the topic.
        #[arg(long, value_name = "FILE")]
        program: Option<PathBuf>,
        /// Partitions of the topic if it has to be created (default: `embedded.partitions`).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=streamc::config::MAX_EMBEDDED_PARTITIONS as i64))]
        partitions: Option<u32>,
    },
    /// Print a topic's committed records, one JSON object per line, and keep printing new ones
    /// as they are committed (as `kafka-console-consumer` does) until Ctrl-C, --exit-at-end,
    /// --max-messages or --timeout-ms.
    Consume {
        /// The topic to read.
        topic: String,
        /// Start at the first record (default: at the end, with the records committed from now).
        #[arg(long)]
        from_beginning: bool,
        /// Read only this partition.
        #[arg(long, value_name = "N")]
        partition: Option<u32>,
        /// With --partition: start at this offset, `earliest` or `latest`.
        #[arg(long, value_name = "OFFSET", requires = "partition", value_parser = parse_offset)]
        offset: Option<u64>,
        /// Stop after printing this many records.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_messages: Option<u64>,
        /// Stop once no record has come for this long (milliseconds).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// Stop at the end of the topic as it is when that is reached, instead of waiting for
        /// more records.
        #[arg(long)]
        exit_at_end: bool,
        /// Keep printing new records (the default; kept for scripts that pass it).
        #[arg(long, hide = true, conflicts_with = "exit_at_end")]
        follow: bool,
        /// Print each record's headers too.
        #[arg(long)]
        headers: bool,
    },
    /// Write a new Ed25519 signing key for control statements; prints the public key to trust.
    Keygen {
        /// Where to write the new private key (must not exist).
        keyfile: PathBuf,
        /// The key's id in `control.trusted_keys` (default: the file's stem).
        #[arg(long)]
        id: Option<String>,
    },
    /// Sign a control statement and post it to the application's control topic.
    Control {
        /// The program file: names the application.
        file: PathBuf,
        /// The statement, in the language (e.g. 'update watch["AAPL"] = { … }'); `-`: read it
        /// from standard input.
        #[arg(required_unless_present = "statement_file")]
        statement: Option<String>,
        /// Read the statement from FILE (`-`: standard input), for statements too long for a
        /// command line.
        #[arg(short = 'f', long = "statement-file", value_name = "FILE", conflicts_with = "statement")]
        statement_file: Option<PathBuf>,
        #[command(flatten)]
        sign: SignArgs,
        /// Post even if the statement does not compile against the running program here.
        #[arg(long)]
        no_check: bool,
    },
    /// Make the running queries those of FILE: prints the state-compatibility report, then
    /// signs and posts `query`, `replace query` and `drop query` statements.
    Deploy {
        /// The program file whose queries should run.
        file: PathBuf,
        #[command(flatten)]
        sign: SignArgs,
        /// Only print the report and the statements.
        #[arg(long)]
        dry_run: bool,
        /// Incompatible replacements rebuild their state from the start of the input.
        #[arg(long, conflicts_with = "fresh_state")]
        reprocess: bool,
        /// Incompatible replacements start their state empty.
        #[arg(long)]
        fresh_state: bool,
    },
    /// Show the running program: query versions, control offsets applied, recent rejections.
    Status {
        /// The program file: names the application.
        file: PathBuf,
    },
    /// Read a store of the application: a key, a key range or prefix, windows by start time.
    /// Asks the running instance (embedded: the one serving --http-addr; or --url), or, with
    /// none running, reads the local state. Prints one JSON row per line.
    Query {
        /// The program file: names the application.
        file: PathBuf,
        /// The store (`streamc explain` lists them under "State stores").
        store: String,
        /// One key (a string key as is; other types as JSON, e.g. 7 or '["a", 1]').
        key: Option<String>,
        /// Keys whose text starts with this (string keys).
        #[arg(long, conflicts_with = "key")]
        prefix: Option<String>,
        /// Keys from this one (included).
        #[arg(long, conflicts_with = "key")]
        from_key: Option<String>,
        /// Keys up to this one (included).
        #[arg(long, conflicts_with = "key")]
        to_key: Option<String>,
        /// Windows starting at or after this time (ms since the epoch, or RFC 3339).
        #[arg(long)]
        from: Option<String>,
        /// Windows starting at or before this time.
        #[arg(long)]
        to: Option<String>,
        /// Ask the instance serving at this address (`HOST:PORT` or `http://HOST:PORT`).
        #[arg(long)]
        url: Option<String>,
    },
    /// The input records that made one output record (replayed in a scratch directory; the
    /// application is not touched), as JSON lines: first the record traced, then its inputs.
    Trace {
        file: PathBuf,
        /// The output topic.
        #[arg(long)]
        topic: String,
        /// The record's partition (with `--offset`).
        #[arg(long, requires = "offset", conflicts_with = "key")]
        partition: Option<u32>,
        /// The record's offset (with `--partition`).
        #[arg(long, requires = "partition", conflicts_with = "key")]
        offset: Option<u64>,
        /// The latest record of this key (as `consume` shows it: a string, or JSON).
        #[arg(long)]
        key: Option<String>,
        /// With `--key`: the latest record of the window starting at this time (epoch ms).
        #[arg(long, requires = "key")]
        window_start: Option<i64>,
    },
    /// The application's dead letters (`<app>-dlq`): counted by reason, or replayed.
    Dlq {
        #[command(subcommand)]
        what: DlqWhat,
    },
    /// Generate deterministic test data.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
}

#[derive(Args)]
struct SignArgs {
    /// The private key (from `streamc keygen`).
    #[arg(long, value_name = "KEYFILE")]
    key: PathBuf,
    /// Sign for this tenant only.
    #[arg(long, default_value = "")]
    tenant: String,
    /// The statement is refused by instances that read it later than this (by its timestamp).
    #[arg(long, default_value = "1h", value_parser = parse_duration_ms)]
    expires_in: i64,
    /// Wait up to this many seconds for the application's verdict (0: do not wait).
    #[arg(long, default_value_t = 0)]
    wait: u64,
}

/// An offset of `consume --offset`: a number, `earliest` (0: the first record there is) or
/// `latest` (the end).
fn parse_offset(s: &str) -> Result<u64, String> {
    match s {
        "earliest" => Ok(0),
        "latest" => Ok(u64::MAX),
        n => n.parse().map_err(|_| "an offset (a number), `earliest` or `latest`".to_string()),
    }
}

fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let (n, unit) =
        s.find(|c: char| !c.is_ascii_digit()).map(|i| s.split_at(i)).ok_or("a duration like 30s, 10m or 1h")?;
    let n: i64 = n.parse().map_err(|_| "a duration like 30s, 10m or 1h")?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("a duration like 30s, 10m or 1h".into()),
    };
    n.checked_mul(ms).ok_or_else(|| "the duration is too long".to_string())
}

#[derive(Subcommand)]
enum DlqWhat {
    /// Count the dead letters by reason: how many, how many replayed, their offsets, the topics
    /// their records came from.
    List {
        /// The program file: names the application.
        file: PathBuf,
    },
    /// Append the records of dead letters again to the topic and partition each was read from,
    /// as it came (key, value, timestamp, headers) plus a `streamc.replay.of` header. Each dead
    /// letter once: a replay cut off is finished by the next one. One replay at a time.
    Replay {
        /// The program file: names the application.
        file: PathBuf,
        /// Only dead letters whose reason contains this text.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Only dead letters at or after this offset of `<app>-dlq`.
        #[arg(long, value_name = "OFFSET")]
        from: Option<u64>,
        /// Only dead letters at or before this offset.
        #[arg(long, value_name = "OFFSET")]
        to: Option<u64>,
    },
}

#[derive(Subcommand)]
enum GenWhat {
    /// Stock trades: {"ticker", "price", "size", "ts"} per line.
    Trades {
        /// How many trades.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// How many distinct tickers (T0000, T0001, …).
        #[arg(long, default_value_t = 10)]
        tickers: u64,
        /// The random seed: the same seed, the same trades.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Trades per second of event time.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Largest lag (ms) of a trade's time behind the trade before it.
        #[arg(long, default_value_t = 500)]
        disorder_ms: u64,
    },
}

fn main() -> ExitCode {
    streamc::memory::configure_allocator();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn render_options() -> RenderOptions {
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(100);
    RenderOptions { color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(), width }
}

fn load_config(g: &Global) -> Result<config::Config, String> {
    let mut sets = g.sets.clone();
    if let Some(b) = &g.bootstrap_servers {
        sets.push(format!("kafka.bootstrap.servers={b}"));
    }
    let cfg = config::load_files(&g.config, &sets).map_err(String::from)?;
    if !cfg.kafka.is_empty() && !cfg.on_kafka() {
        let keys: Vec<String> = cfg.kafka.keys().map(|k| format!("kafka.{k}")).collect();
        eprintln!(
            "warning: {} ignored: without kafka.bootstrap.servers, streamc works on the embedded log",
            keys.join(", ")
        );
    }
    Ok(cfg)
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// A program file's text with the fields of every `value avro` / `value protobuf` declared without them filled in
/// from the schema registry's latest schema of `<topic>-value` (see
/// `streamc::expand_registry_fields`): what `check`, `explain`, `run`, `deploy` and `produce`
/// compile, and what a run records as its program. A lookup that fails is printed as a
/// diagnostic at the declaration: None (like [`compile_file`]).
pub(crate) fn read_program(path: &Path, cfg: &config::Config) -> Result<Option<String>, String> {
    expand_program(path, read(path)?, cfg)
}

/// [`read_program`] of a file's text already read.
fn expand_program(path: &Path, text: String, cfg: &config::Config) -> Result<Option<String>, String> {
    if !streamc::has_registry_fields(&text) {
        return Ok(Some(text));
    }
    let registry = streamc::registry::Registry::of(cfg);
    let mut lookup = |topic: &str, format: streamc::ast::Format| -> Result<String, String> {
        let Some(r) = &registry else { return Err("no registry is configured (`schema.registry.url`)".into()) };
        let subject = format!("{topic}-value");
        match streamc::runtime::schemas::retry(|| r.latest(&subject)).map_err(|e| e.to_string())? {
            Some((version, schema, kind)) => {
                let at = format!("subject `{subject}` version {version}");
                if !streamc::runtime::schemas::reads_as(format, &schema, kind) {
                    return Err(format!("{at} is a {kind:?} schema, not {format}"));
                }
                let fields = match format {
                    streamc::ast::Format::Protobuf => streamc::format::protobuf::declared_fields(&schema),
                    streamc::ast::Format::Avro => streamc::format::avro::declared_fields(&schema),
                    other => return Err(format!("{at}: a `{other}` value has no schema in a registry")),
                }
                .map_err(|e| format!("{at}: {e}"))?;
                eprintln!("value {format} of `{topic}`: the fields of {at}: {fields}");
                Ok(fields)
            }
            None => Err(format!("the registry at {} has no subject `{subject}`", r.url())),
        }
    };
    match streamc::expand_registry_fields(&text, &mut lookup) {
        Ok(expanded) => Ok(Some(expanded)),
        Err(diags) => {
            eprint!("{}", diag::render(&diags, &path.display().to_string(), &text, render_options()));
            let n = diags.len();
            eprintln!("error: {} has {} error{}", path.display(), n, if n == 1 { "" } else { "s" });
            Ok(None)
        }
    }
}

/// Compile a file, printing its diagnostics; None if it has errors.
pub(crate) fn compile_file(path: &Path, text: &str) -> Option<hir::Program> {
    match streamc::compile(text) {
        Ok(p) => Some(p),
        Err(diags) => {
            eprint!("{}", diag::render(&diags, &path.display().to_string(), text, render_options()));
            let n = diags.len();
            eprintln!("error: {} has {} error{}", path.display(), n, if n == 1 { "" } else { "s" });
            None
        }
    }
}

/// Print the diagnostics of queries that write to reserved topics (`plan::reserved_sinks`) in
/// application `app`; true if there were any.
fn refuse_reserved_sinks(path: &Path, text: &str, p: &hir::Program, app: &str, cfg: &config::Config) -> bool {
    let diags = plan::reserved_sinks(p, app, &cfg.topics.allow_internal_sinks);
    if diags.is_empty() {
        return false;
    }
    eprint!("{}", diag::render(&diags, &path.display().to_string(), text, render_options()));
    let n = diags.len();
    eprintln!("error: {} has {} error{}", path.display(), n, if n == 1 { "" } else { "s" });
    true
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    // (Formatting and the language server need no configuration: a broken one must not stop them.)
    let cfg = if matches!(cli.command, Command::Fmt { .. } | Command::Lsp) {
        config::Config::default()
    } else {
        load_config(&cli.global)?
    };
    if matches!(cli.command, Command::Run { .. } | Command::Query { .. }) {
        // How this process asks instances' HTTP servers (a run asks the other instances).
        streamc::runtime::query::set_client(&cfg.http)?;
    }
    match cli.command {
        Command::Check { files, statement } => check(&cfg, &files, statement.as_deref()),
        Command::Run { file, inputs, drain, close_windows_at_end, threads, http_addr, chaos, reset } => {
            let o = RunFlags {
                inputs,
                drain,
                close: close_windows_at_end,
                threads: threads.into(),
                http_addr,
                chaos,
                reset,
            };
            run_program(&cli.global, cfg, &file, o)
        }
        Command::Test { program, fixtures } => test_cli::test(&cli.global, &program, &fixtures),
        Command::Keygen { keyfile, id } => control_cli::keygen(&keyfile, id.as_deref()),
        Command::Control { file, statement, statement_file, sign, no_check } => {
            let post = control_cli::Post {
                key: &sign.key,
                tenant: &sign.tenant,
                expires_in_ms: sign.expires_in,
                wait_secs: sign.wait,
            };
            let statement = read_statement(statement, statement_file)?;
            control_cli::control_cmd(&cli.global.state_dir, &cfg, &file, &statement, !no_check, &post)
        }
        Command::Deploy { file, sign, dry_run, reprocess, fresh_state } => {
            let post = control_cli::Post {
                key: &sign.key,
                tenant: &sign.tenant,
                expires_in_ms: sign.expires_in,
                wait_secs: sign.wait,
            };
            let mode = if reprocess {
                Some("reprocess")
            } else if fresh_state {
                Some("fresh state")
            } else {
                None
            };
            control_cli::deploy(&cli.global.state_dir, &cfg, &file, dry_run, mode, &post)
        }
        Command::Status { file } => control_cli::status(&cli.global.state_dir, &cfg, &file),
        Command::Query { file, store, key, prefix, from_key, to_key, from, to, url } => {
            let time = |t: Option<String>| t.as_deref().map(streamc::runtime::query::parse_time).transpose();
            let fetch = streamc::runtime::query::Fetch {
                store,
                key,
                prefix,
                from_key,
                to_key,
                from: time(from)?,
                to: time(to)?,
                local: false,
            };
            control_cli::query(&cli.global.state_dir, &cfg, &file, &fetch, url.as_deref())
        }
        Command::Produce { topic, file, envelope, program, partitions } => {
            produce(&cli.global, &cfg, &topic, file.as_deref(), envelope, program.as_deref(), partitions)
        }
        Command::Consume {
            topic,
            from_beginning,
            partition,
            offset,
            max_messages,
            timeout_ms,
            exit_at_end,
            follow: _,
            headers,
        } => {
            let start = match (partition, offset) {
                (Some(p), Some(o)) => Start::At(vec![(p, o)]),
                (Some(p), None) => Start::At(vec![(p, if from_beginning { 0 } else { u64::MAX })]),
                (None, _) if from_beginning => Start::Beginning,
                (None, _) => Start::End,
            };
            let flags = ConsumeFlags {
                start,
                follow: !exit_at_end,
                max_messages,
                timeout: timeout_ms.map(std::time::Duration::from_millis),
                headers,
            };
            consume(&cli.global, &cfg, &topic, &flags)
        }
        Command::Trace { file, topic, partition, offset, key, window_start } => {
            let target = trace_cli::Target { topic, partition, offset, key, window_start };
            trace_cli::trace(&cli.global, cfg, &file, &target)
        }
        Command::Dlq { what: DlqWhat::List { file } } => dlq_cli::list(&cli.global.state_dir, &cfg, &file),
        Command::Dlq { what: DlqWhat::Replay { file, reason, from, to } } => {
            let filter = streamc::dlq::Filter { reason, from, to };
            dlq_cli::replay(&cli.global.state_dir, &cfg, &file, &filter)
        }
        Command::Gen { what: GenWhat::Trades { count, tickers, seed, rate, disorder_ms } } => {
            let o = streamc::gen::TradesOptions { count, tickers, seed, rate, disorder_ms };
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            match streamc::gen::trades(&o, &mut w) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
                Err(e) => Err(format!("cannot write: {e}")),
            }
        }
        Command::Fmt { files, check } => fmt_cli::fmt(&files, check),
        Command::Lsp => {
            streamc::lsp::run_stdio().map(|clean| if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Explain { file, query, format } => {
            let Some(text) = read_program(&file, &cfg)? else { return Ok(ExitCode::from(1)) };
            let Some(p) = compile_file(&file, &text) else { return Ok(ExitCode::from(1)) };
            if let Some(q) = &query {
                if p.query(q).is_none() {
                    let names: Vec<&str> = p.queries.iter().map(|q| q.name.as_str()).collect();
                    return Err(format!("no query `{q}` in {}; it has {}", file.display(), names.join(", ")));
                }
            }
            let app = config::application_id(&cfg, &file)?;
            let topo = plan::lower(&p, &app);
            print!("{}", explain::render(&topo, query.as_deref(), format));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `streamc check FILE...`: each program compiled and its sinks' schemas checked against the
/// registry, and `--statement` checked against the one program; exit 1 if any fails, 2 if a file
/// cannot be read.
fn check(cfg: &config::Config, files: &[PathBuf], statement: Option<&str>) -> Result<ExitCode, String> {
    if statement.is_some() && files.len() != 1 {
        return Err("--statement checks against exactly one program".into());
    }
    let mut failed = false;
    let mut unreadable = false;
    for f in files {
        let text = match read_program(f, cfg) {
            Ok(Some(t)) => t,
            Ok(None) => {
                failed = true;
                continue;
            }
            Err(e) => {
                eprintln!("error: {e}");
                unreadable = true;
                continue;
            }
        };
        let Some(p) = compile_file(f, &text) else {
            failed = true;
            continue;
        };
        // (A file whose name is no application id checks as a program alone.)
        let app = config::application_id(cfg, f).ok();
        if app.as_deref().is_some_and(|app| refuse_reserved_sinks(f, &text, &p, app, cfg)) {
            failed = true;
            continue;
        }
        let streams = p.sources.iter().filter(|s| s.kind == hir::SourceKind::Stream).count();
        println!(
            "{}: ok ({} stream{}, {} table{}, {} quer{})",
            f.display(),
            streams,
            s(streams),
            p.sources.len() - streams,
            s(p.sources.len() - streams),
            p.queries.len(),
            if p.queries.len() == 1 { "y" } else { "ies" }
        );
        if !registry_sinks_compatible(cfg, &p, app.as_deref().unwrap_or("app"))? {
            failed = true;
        }
        if let Some(stmt) = statement {
            let app = app.as_deref().unwrap_or("app");
            let checked = plan::check_statement_text(&p, stmt, app, &cfg.topics.allow_internal_sinks);
            match checked {
                Ok(_) => println!("statement: ok"),
                Err(diags) => {
                    eprint!("{}", diag::render(&diags, "<statement>", stmt, render_options()));
                    let n = diags.len();
                    eprintln!("error: the statement has {} error{}", n, s(n));
                    failed = true;
                }
            }
        }
    }
    Ok(if unreadable {
        ExitCode::from(2)
    } else if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn log_of(g: &Global, cfg: &config::Config) -> Result<streamc::log::EmbeddedLog, String> {
    if cfg.on_kafka() {
        return Err("`run` on Kafka is not available yet (`produce` and `consume` are); remove kafka.bootstrap.servers to use the embedded log".into());
    }
    streamc::log::EmbeddedLog::open(&g.state_dir, cfg.embedded.fsync).map_err(String::from)
}

/// The flags of `streamc run`.
struct RunFlags {
    inputs: Vec<String>,
    drain: bool,
    close: bool,
    threads: usize,
    http_addr: Option<String>,
    chaos: Option<streamc::runtime::chaos::ChaosSpec>,
    reset: bool,
}

fn run_program(g: &Global, cfg: config::Config, file: &Path, flags: RunFlags) -> Result<ExitCode, String> {
    let RunFlags { inputs, drain, close, threads, http_addr, chaos, reset } = flags;
    let source = read(file)?;
    let app = config::application_id(&cfg, file)?;
    // A run of the program file the application already runs keeps the fields it took from the
    // registry then (every instance and restart compiles the same program); `--reset` and
    // `deploy` look them up again.
    let recorded = match !reset && streamc::has_registry_fields(&source) {
        true => streamc::topics::open(&g.state_dir, &cfg)
            .and_then(|t| control_cli::recorded_expansion(&*t, &app, &source))?,
        false => None,
    };
    let text = match recorded {
        Some(text) => {
            eprintln!("value avro/protobuf: the fields `{app}` took from the registry when it first ran this file (`run --reset` or `deploy` looks them up again)");
            text
        }
        None => match expand_program(file, source.clone(), &cfg)? {
            Some(text) => text,
            None => return Ok(ExitCode::from(1)),
        },
    };
    let Some(p) = compile_file(file, &text) else { return Ok(ExitCode::from(1)) };
    if refuse_reserved_sinks(file, &text, &p, &app, &cfg) {
        return Ok(ExitCode::from(1));
    }
    let on_kafka = cfg.on_kafka();
    if on_kafka {
        if !inputs.is_empty() {
            return Err("--input is for the embedded log; on Kafka, write the input with `streamc produce`".into());
        }
        if chaos.is_some() {
            return Err("--chaos is for the embedded log; on Kafka, kill instances instead".into());
        }
    }
    // On the embedded log, no other run of the application may be live while this one resets
    // it or records its program: the run lock is held until the run takes it over.
    let run_lock = match on_kafka {
        true => None,
        false => Some(log_of(g, &cfg)?.lock_run(&app).map_err(String::from)?),
    };
    // Version 0 of the running program: the file as the application first ran it.
    let topics = streamc::topics::open(&g.state_dir, &cfg)?;
    if reset {
        control_cli::reset(&*topics, &app, &g.state_dir, &text, &source, &cfg)?;
    } else if !control_cli::check_program_file(&*topics, &app, &cfg, &text, &source, &p)? {
        return Err(format!(
            "{} changed incompatibly since `{app}` first ran: start it over with `streamc run --reset`, or change the running application with `streamc deploy --reprocess` or `--fresh-state`",
            file.display()
        ));
    }
    drop(topics);
    let topo = plan::lower(&p, &app);
    let mut ins = Vec::new();
    for i in &inputs {
        let (t, f) = i.split_once('=').ok_or_else(|| format!("--input {i}: expected TOPIC=FILE"))?;
        if !p.sources.iter().any(|s| s.topic.as_deref() == Some(t)) {
            let read: Vec<&str> = p.sources.iter().filter_map(|s| s.topic.as_deref()).collect();
            return Err(format!("--input {i}: the program reads no topic `{t}` (it reads {})", read.join(", ")));
        }
        ins.push((t.to_string(), PathBuf::from(f)));
    }
    // Served from before the restore (so a scrape shows its progress) until the run ends.
    let metrics = http_addr.as_ref().map(|_| std::sync::Arc::new(streamc::runtime::metrics::Metrics::new(&app)));
    let mut served = None;
    let server = match (&http_addr, &metrics) {
        (Some(addr), Some(m)) => {
            let access = streamc::runtime::http::Access::from_config(&cfg.http)?;
            let scheme = if access.tls() { "https" } else { "http" };
            let server = streamc::runtime::http::serve(addr, m.clone(), access)?;
            if let Some(a) = server.addr() {
                eprintln!(
                    "serving metrics on {scheme}://{a}/metrics, probes on /healthz and /ready, stores on /stores, the console on /"
                );
                let advertised = cfg.application.server.clone().or_else(|| {
                    (!a.ip().is_unspecified()).then(|| {
                        if scheme == "https" {
                            format!("https://{a}")
                        } else {
                            a.to_string()
                        }
                    })
                });
                m.queries.set_me(&app, "embedded", advertised);
                m.console.set_backend(if on_kafka { "kafka" } else { "embedded" });
                if !on_kafka {
                    // `streamc query` asks the running instance here (forgotten when the run
                    // ends, however it ends).
                    let at = if scheme == "https" { format!("https://{a}") } else { a.to_string() };
                    streamc::runtime::query::set_served_at(&g.state_dir, &app, Some(&at));
                    served = Some(Served(g.state_dir.clone(), app.clone()));
                }
            }
            Some(server)
        }
        _ => None,
    };
    let opts = streamc::runtime::options::RunOptions {
        state_dir: g.state_dir.clone(),
        app,
        threads,
        drain,
        close_windows_at_end: close,
        inputs: ins,
        config: cfg,
        metrics,
        progress: std::io::stderr().is_terminal(),
        chaos,
        restores: Default::default(),
        program_text: text.clone(),
    };
    let started = std::time::Instant::now();
    let sum = if on_kafka {
        streamc::runtime::kafka::run(&p, &topo, &opts)?
    } else {
        drop(run_lock);
        streamc::runtime::embedded::run(&p, &topo, &opts)?
    };
    drop(served);
    drop(server);
    let secs = started.elapsed().as_secs_f64();
    // The rate is over the time spent processing: a live run that mostly waited for input
    // would otherwise report its idle time as slowness.
    // (Start-up is in neither: the clause shows only when at least a second went to waiting.)
    let busy = sum.busy.as_secs_f64().min(secs);
    let when = if busy < 0.9 * secs && secs - busy >= 1.0 {
        format!("{secs:.2}s ({busy:.2}s of it processing: {:.0}/s)", sum.records_in as f64 / busy.max(1e-9))
    } else {
        format!("{secs:.2}s ({:.0}/s)", sum.records_in as f64 / secs.max(1e-9))
    };
    eprintln!(
        "processed {} record{} in {when}: {} out, {} late, {} dead letter{}, {} skipped, {} restored, {} commit{}",
        sum.records_in,
        s(sum.records_in as usize),
        sum.records_out,
        sum.late,
        sum.dead_letters,
        s(sum.dead_letters as usize),
        sum.skipped,
        sum.restored,
        sum.commits,
        s(sum.commits as usize)
    );
    if opts.chaos.is_some() {
        eprintln!("chaos: {} faults injected", sum.faults);
    }
    if sum.interrupted && opts.drain {
        eprintln!(
            "stopped by a signal before the input was drained: what was processed is committed; run again to go on"
        );
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

fn produce(
    g: &Global,
    cfg: &config::Config,
    topic: &str,
    file: Option<&Path>,
    envelope: bool,
    program: Option<&Path>,
    partitions: Option<u32>,
) -> Result<ExitCode, String> {
    use std::io::BufRead;
    use streamc::record::{partition_for, Record};
    let create = partitions.unwrap_or(cfg.embedded.partitions).max(1);
    // The embedded log in the state directory, or Kafka when `kafka.bootstrap.servers` is set.
    let topics = streamc::topics::open(&g.state_dir, cfg)?;
    let source = match program {
        Some(f) => {
            let raw = read(f)?;
            if streamc::registry_field_topics(&raw).iter().any(|t| t == topic) {
                // (Its values would be written with a schema derived from the fields, registered
                // as a new version of the producers' subject.)
                return Err(format!(
                    "`{topic}` takes its fields from the schema registry in {}: produce its records with a program that declares them (`value avro {{ … }}` or `value protobuf {{ … }}`)",
                    f.display()
                ));
            }
            let Some(text) = expand_program(f, raw, cfg)? else { return Ok(ExitCode::from(1)) };
            let Some(p) = compile_file(f, &text) else { return Ok(ExitCode::from(1)) };
            p.sources.into_iter().find(|s| s.topic.as_deref() == Some(topic))
        }
        None => None,
    };
    let nparts = topics.ensure_topic(topic, create, &[])?;
    let reader: Box<dyn BufRead> = match file {
        Some(f) if f != Path::new("-") => Box::new(std::io::BufReader::new(
            std::fs::File::open(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?,
        )),
        _ => Box::new(std::io::BufReader::new(std::io::stdin())),
    };
    // Each record with its partition, appended every 10,000 records (one commit, or one
    // flushed batch on Kafka).
    let mut batch: Vec<(u32, Record)> = Vec::new();
    let (mut n, mut rr) = (0u64, 0u32);
    let flush = |batch: &mut Vec<(u32, Record)>| match batch.is_empty() {
        true => Ok(()),
        false => topics.append(topic, std::mem::take(batch)),
    };
    let mut blank = 0u64;
    let mut keyless = 0u64;
    register_produced(cfg, topic, source.as_ref())?;
    let placer = streamc::runtime::LinePlacer::new(source.as_ref());
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("cannot read input: {e}"))?;
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        let now = streamc::runtime::now_ms();
        let rec = if envelope {
            let (mut rec, structured) = envelope_record(&line, now).map_err(|e| format!("line {}: {e}", i + 1))?;
            // An object value of an avro or protobuf source: written in its format (a string
            // value stays its bytes).
            if let (true, Some(v)) = (structured, &rec.value) {
                if let Some(a) = placer.registered_value(v) {
                    rec.value = Some(a);
                }
            }
            // A key of a source whose keys are avro or protobuf: written in that format.
            if let Some(k) = rec.key.as_deref().and_then(|k| placer.registered_key(k)) {
                rec.key = Some(k);
            }
            rec
        } else {
            placer.record(line.as_bytes(), now)
        };
        let p = match &rec.key {
            Some(k) => partition_for(k, nparts),
            None => {
                keyless += 1;
                rr = (rr + 1) % nparts;
                rr
            }
        };
        batch.push((p, rec));
        n += 1;
        if n.is_multiple_of(10_000) {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    if blank > 0 {
        eprintln!(
            "produced {n} record{} to {topic} ({blank} blank line{} skipped)",
            s(n as usize),
            if blank == 1 { "" } else { "s" }
        );
    } else {
        eprintln!("produced {n} record{} to {topic}", s(n as usize));
    }
    if let Some(src) = source.as_ref().filter(|s| s.kind == hir::SourceKind::Table && keyless > 0) {
        warn_keyless_rows(src, keyless);
    }
    Ok(ExitCode::SUCCESS)
}

/// For `produce` to an avro or protobuf source: its schema (derived from its declared fields)
/// registered for the topic, so that each line's (or envelope's) JSON object is written in its
/// format with it; likewise its keys, in their format (`key … avro|protobuf`).
fn register_produced(cfg: &config::Config, topic: &str, source: Option<&hir::Source>) -> Result<(), String> {
    if let Some(src) = source.filter(|s| s.format.uses_registry()) {
        let registry = streamc::registry::Registry::of(cfg)
            .ok_or_else(|| format!("`{}` is {}: set schema.registry.url to produce to it", src.name, src.format))?;
        streamc::runtime::schemas::register(&registry, topic, &src.wire, src.format).map_err(|e| e.to_string())?;
    }
    if let Some((src, format)) = source.and_then(|s| Some((s, s.key_format?))) {
        let registry = streamc::registry::Registry::of(cfg).ok_or_else(|| {
            format!("the keys of `{}` are {format}: set schema.registry.url to produce to it", src.name)
        })?;
        let field = src.key_name().unwrap_or("key");
        streamc::runtime::schemas::register_key(&registry, topic, &src.key_type(), field, format)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A table's rows need keys: say so when `produce`'s lines gave `keyless` of them none (a key
/// declared outside the value cannot come from a plain line).
fn warn_keyless_rows(src: &hir::Source, keyless: u64) {
    let how = match &src.key {
        hir::KeySpec::Named(name, _) => format!(
            "its key `{name}` is not in the value, so a plain line cannot give it: write the rows with --envelope ({{\"key\": …, \"value\": …}})"
        ),
        _ => "give each row a key (--envelope, or the value's key field)".to_string(),
    };
    eprintln!(
        "warning: {keyless} of these records have no key, and `{}` is a table: a run dead-letters them; {how}",
        src.name
    );
}

/// The record of an envelope line, and whether its value was a JSON object or array (not a
/// string of raw bytes).
fn envelope_record(line: &str, now: i64) -> Result<(streamc::record::Record, bool), String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let bytes = |x: &serde_json::Value| -> Option<Vec<u8>> {
        match x {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.as_bytes().to_vec()),
            other => Some(other.to_string().into_bytes()),
        }
    };
    let key = v.get("key").and_then(bytes);
    let structured = matches!(v.get("value"), Some(serde_json::Value::Object(_) | serde_json::Value::Array(_)));
    let value = match v.get("value") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.as_bytes().to_vec()),
        Some(other) => Some(other.to_string().into_bytes()),
    };
    let timestamp = match v.get("timestamp") {
        None | Some(serde_json::Value::Null) => now,
        Some(serde_json::Value::Number(n)) => n.as_i64().ok_or("timestamp must be an integer")?,
        Some(serde_json::Value::String(s)) => {
            streamc::value::parse_rfc3339(s).ok_or("timestamp must be epoch ms or RFC 3339")?
        }
        Some(_) => return Err("timestamp must be epoch ms or RFC 3339".into()),
    };
    let headers = match v.get("headers") {
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v.get("hex") {
                // Bytes that are not UTF-8 (a tenant id, say): `{"hex": "ff00"}`.
                Some(serde_json::Value::String(h)) => {
                    hex::decode(h).map(|b| (k.clone(), b)).map_err(|e| format!("header `{k}`: bad hex: {e}"))
                }
                _ => Ok((k.clone(), bytes(v).unwrap_or_default())),
            })
            .collect::<Result<Vec<_>, String>>()?,
        _ => Vec::new(),
    };
    Ok((streamc::record::Record { key, value, timestamp, headers }, structured))
}

/// How `streamc consume` reads.
struct ConsumeFlags {
    start: Start,
    follow: bool,
    max_messages: Option<u64>,
    timeout: Option<std::time::Duration>,
    headers: bool,
}

fn consume(g: &Global, cfg: &config::Config, topic: &str, o: &ConsumeFlags) -> Result<ExitCode, String> {
    use std::io::Write;
    let topics = streamc::topics::open(&g.state_dir, cfg)?;
    if let Start::At(parts) = &o.start {
        let n = topics.partitions(topic)?.unwrap_or(0);
        if let Some((p, _)) = parts.iter().find(|(p, _)| *p >= n) {
            return Err(format!("`{topic}` has no partition {p} (it has {n})"));
        }
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // Records are printed in batches of up to 10,000, the schemas their values and keys name
    // fetched from the registry first (as a batch: `Registry::of` is not free); a batch ends
    // whenever the reader is at the end for now, and the output is flushed then. A registry
    // error stops the reading, except while following Kafka (the record is printed as it is).
    // A failed write, such as a closed pipe, stops it too.
    let mut failed = None;
    let mut batch: Vec<(u32, streamc::record::Stored)> = Vec::new();
    let mut following = false;
    let on_kafka = topics.is_kafka();
    let mut print = |batch: &mut Vec<(u32, streamc::record::Stored)>, following: bool, at_end: bool| -> bool {
        let recs: Vec<&streamc::record::Stored> = batch.iter().map(|(_, s)| s).collect();
        if let Err(e) = prefetch_registered(cfg, topic, &recs) {
            if !(following && on_kafka) {
                failed = Some(e);
                return false;
            }
        }
        batch.drain(..).all(|(p, s)| writeln!(out, "{}", consumed_json(topic, p, &s, o.headers)).is_ok())
            && (!at_end || out.flush().is_ok())
    };
    let mut printed = 0u64;
    let mut last = std::time::Instant::now();
    let mut timed_out = false;
    let from_beginning =
        matches!(o.start, Start::Beginning) || matches!(&o.start, Start::At(p) if p.iter().all(|(_, o)| *o == 0));
    // (What to say when nothing is printed at the first end.)
    let nothing = |topics: &dyn streamc::topics::Topics| match &o.start {
        Start::At(parts) if !from_beginning => {
            let (p, at) = parts[0];
            let at = if at == u64::MAX { "its end".to_string() } else { format!("offset {at}") };
            format!("no record of `{topic}` partition {p} from {at} (an offset past the end starts at the end)")
        }
        _ => nothing_read(topics, topic, from_beginning),
    };
    topics.stream(topic, &o.start, o.follow, &mut |rec| match rec {
        Some((p, s)) => {
            printed += 1;
            last = std::time::Instant::now();
            batch.push((p, s));
            if o.max_messages.is_some_and(|m| printed >= m) {
                return false;
            }
            batch.len() < 10_000 || print(&mut batch, following, false)
        }
        None => {
            let ok = print(&mut batch, following, true);
            if !following && printed == 0 && o.follow {
                eprintln!("{}; waiting for new records (Ctrl-C to stop)", nothing(&*topics));
            }
            following = true;
            if o.timeout.is_some_and(|t| last.elapsed() >= t) {
                timed_out = true;
                return false;
            }
            ok
        }
    })?;
    print(&mut batch, following, true);
    let _ = out.flush();
    if let Some(e) = failed {
        return Err(e);
    }
    if printed == 0 && !o.follow {
        // Nothing on stdout: say why on stderr (a user's first `consume` of a topic with records
        // starts at its end).
        eprintln!("{}", nothing(&*topics));
    }
    if timed_out {
        eprintln!(
            "no record for {} ms: stopped after {printed} record{}",
            o.timeout.unwrap_or_default().as_millis(),
            s(printed as usize)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn nothing_read(topics: &dyn streamc::topics::Topics, topic: &str, from_beginning: bool) -> String {
    let n = topics.partitions(topic).ok().flatten().unwrap_or(0);
    let parts: Vec<(String, u32)> = (0..n).map(|p| (topic.to_string(), p)).collect();
    let held: u64 = topics.record_counts(&parts).map(|c| c.into_iter().flatten().sum()).unwrap_or(0);
    match (held, from_beginning) {
        (0, _) => format!("`{topic}` holds no committed record"),
        (_, true) => format!("no record of `{topic}` printed"),
        (held, false) => format!(
            "no record printed: without --from-beginning, consume starts at the end of `{topic}`, after the {held} record{} it holds",
            if held == 1 { "" } else { "s" }
        ),
    }
}

/// With a schema registry configured: whether each avro or protobuf sink's schema (derived from
/// its output type), and the schema of its keys in the wire format (`to … key avro`), is
/// compatible with its subject's latest version, by the subject's rules (printed; an
/// incompatible one as an error). True without a registry or such sinks.
pub(crate) fn registry_sinks_compatible(cfg: &config::Config, p: &hir::Program, app: &str) -> Result<bool, String> {
    use streamc::registry::Compat;
    let Some(registry) = streamc::registry::Registry::of(cfg) else { return Ok(true) };
    let topo = plan::lower(p, app);
    let specs = plan::physical::specs(p, &topo).map_err(|e| e.to_string())?;
    let mut seen = std::collections::BTreeSet::new();
    let mut ok = true;
    for sink in specs.iter().flat_map(|s| s.sinks()) {
        // The value's schema, and the keys' (`to … key avro|protobuf`), each against its subject.
        let value = sink
            .registry_schema
            .as_deref()
            .map(|s| (sink.format, s, streamc::runtime::schemas::subject(&sink.topic), ""));
        let key = sink.key_schema.as_ref().map(|(f, s)| (*f, s.as_str(), format!("{}-key", sink.topic), " keys"));
        for (fmt, schema, subject, what) in value.into_iter().chain(key) {
            if !seen.insert(subject.clone()) {
                continue;
            }
            let kind = streamc::runtime::schemas::schema_type(fmt);
            match registry.compatibility(&subject, schema, kind).map_err(|e| e.to_string())? {
                Compat::NoSubject => {
                    println!(
                        "{fmt} sink `{}`{what}: subject `{subject}` has no version yet (registered when the program runs)",
                        sink.topic
                    )
                }
                Compat::Compatible { version } => {
                    println!("{fmt} sink `{}`{what}: compatible with `{subject}` version {version}", sink.topic)
                }
                Compat::Incompatible { version, messages } => {
                    ok = false;
                    eprintln!(
                        "error: {fmt} sink `{}`{what}: its schema is not compatible with `{subject}` version {version}{}",
                        sink.topic,
                        if messages.is_empty() { String::new() } else { format!(": {}", messages.join("; ")) }
                    );
                    eprintln!("  schema: {schema}");
                }
            }
        }
    }
    Ok(ok)
}

/// With a schema registry configured, `consume` prints values in the Avro or Protobuf wire
/// format as JSON.
static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Look up the writer schemas of the Avro and Protobuf values and keys among `recs` (with a
/// registry configured).
pub(crate) fn prefetch_registered(
    cfg: &config::Config,
    topic: &str,
    recs: &[&streamc::record::Stored],
) -> Result<(), String> {
    if streamc::registry::Registry::of(cfg).is_none() {
        return Ok(());
    }
    REGISTERED.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in recs {
        for bytes in [s.record.value.as_deref(), s.record.key.as_deref()] {
            streamc::runtime::schemas::prefetch_any(cfg, &format!("topic `{topic}`"), bytes)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// One consumed record as docs/conventions.md prints it.
fn consumed_json(topic: &str, p: u32, s: &streamc::record::Stored, headers: bool) -> serde_json::Value {
    let decode = |b: &Option<Vec<u8>>| -> serde_json::Value {
        match b {
            None => serde_json::Value::Null,
            // A value in the wire format whose schema the registry gave (see `consume`).
            Some(b)
                if REGISTERED.load(std::sync::atomic::Ordering::Relaxed)
                    && streamc::format::avro::schema_id(b).is_ok() =>
            {
                let protobuf = streamc::format::avro::schema_id(b).is_ok_and(streamc::format::protobuf::writer_known)
                    && !streamc::format::avro::schema_id(b).is_ok_and(streamc::format::avro::writer_known);
                if protobuf { streamc::format::protobuf::to_json(b) } else { streamc::format::avro::to_json(b) }
                    .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(b).into_owned()))
            }
            Some(b) => serde_json::from_slice(b)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(b).into_owned())),
        }
    };
    let mut o = serde_json::json!({
        "topic": topic, "partition": p, "offset": s.offset, "timestamp": s.record.timestamp,
        "key": decode(&s.record.key), "value": decode(&s.record.value),
    });
    // A dead letter's or late record's reason, shown without --headers too.
    if let Some(why) = s.record.header("streamc.error") {
        o["error"] = serde_json::Value::String(String::from_utf8_lossy(why).into_owned());
    }
    if headers {
        let h: serde_json::Map<String, serde_json::Value> = s
            .record
            .headers
            .iter()
            .map(|(k, v)| {
                let v = match std::str::from_utf8(v) {
                    Ok(t) => serde_json::Value::String(t.to_string()),
                    Err(_) => serde_json::json!({ "hex": hex::encode(v) }),
                };
                (k.clone(), v)
            })
            .collect();
        o["headers"] = serde_json::Value::Object(h);
    }
    o
}

fn s(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The address an embedded run serves its stores at, recorded in its state directory until
/// this is dropped.
struct Served(PathBuf, String);

impl Drop for Served {
    fn drop(&mut self) {
        streamc::runtime::query::set_served_at(&self.0, &self.1, None);
    }
}
