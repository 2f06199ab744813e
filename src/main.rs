//! The `streamc` command line. Diagnostics are rendered here and nowhere else.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use streamc::diag::{self, RenderOptions};
use streamc::explain::{self, ExplainFormat};
use streamc::{check, config, hir, plan, syntax};

#[derive(Parser)]
#[command(name = "streamc", version, about = "A stream processor for a small declarative language")]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand takes.
#[derive(Args)]
struct Global {
    /// YAML configuration file.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
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
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also check a control statement against the (single) program.
        #[arg(long, value_name = "TEXT")]
        statement: Option<String>,
    },
    /// Print the processor DAG: sub-topologies, processors, stores, changelog and repartition topics.
    Explain {
        file: PathBuf,
        /// Only this query.
        #[arg(long)]
        query: Option<String>,
        #[arg(long, value_enum, default_value_t = ExplainFormat::Text)]
        format: ExplainFormat,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

fn render_options() -> RenderOptions {
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(100);
    RenderOptions { color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(), width }
}

fn load_config(g: &Global) -> Result<config::Config, String> {
    let mut sets = g.sets.clone();
    if let Some(b) = &g.bootstrap_servers {
        sets.push(format!("kafka.bootstrap.servers={b}"));
    }
    config::load(g.config.as_deref(), &sets)
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Compile a file, printing its diagnostics; None if it has errors.
fn compile_file(path: &Path, text: &str) -> Option<hir::Program> {
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

fn run(cli: Cli) -> Result<ExitCode, String> {
    let cfg = load_config(&cli.global)?;
    match cli.command {
        Command::Check { files, statement } => {
            if statement.is_some() && files.len() != 1 {
                return Err("--statement checks against exactly one program".into());
            }
            let mut failed = false;
            let mut unreadable = false;
            for f in &files {
                let text = match read(f) {
                    Ok(t) => t,
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
                let streams = p.sources.iter().filter(|s| s.kind == hir::SourceKind::Stream).count();
                println!("{}: ok ({} stream{}, {} table{}, {} quer{})", f.display(), streams, s(streams), p.sources.len() - streams, s(p.sources.len() - streams), p.queries.len(), if p.queries.len() == 1 { "y" } else { "ies" });
                if let Some(stmt) = &statement {
                    match syntax::parse_statement(stmt).and_then(|ast| check::check_statement(&p, &ast, stmt)) {
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
        Command::Explain { file, query, format } => {
            let text = read(&file)?;
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

fn s(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
