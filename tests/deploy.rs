//! `deploy/`: the Kubernetes manifests and the container image.
//!
//! The manifests are checked offline against the Kubernetes API schemas by
//! `kubernetes-validate` (from PyPI; `./dev/test` installs it and sets `STREAMC_K8S_VALIDATE`):
//! that test is `#[ignore]`d so that a plain `cargo test` lists it as not run. What the
//! manifests say about streamc itself (its program, configuration, flags and probes) is checked
//! here without any tool.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifests() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

/// The first manifest of a kind (in file name order).
fn by_kind(kind: &str) -> Value {
    by_kind_and_name(kind, None)
}

/// The manifest of a kind, with `name` if given.
fn by_kind_and_name(kind: &str, name: Option<&str>) -> Value {
    for p in manifests() {
        let v: Value = serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        if v["kind"].as_str() == Some(kind) && name.is_none_or(|n| v["metadata"]["name"].as_str() == Some(n)) {
            return v;
        }
    }
    panic!("no {kind} {name:?} in deploy/k8s");
}

fn validator() -> Command {
    match std::env::var_os("STREAMC_K8S_VALIDATE") {
        Some(p) => Command::new(p),
        None => Command::new("kubernetes-validate"),
    }
}

fn validate(files: &[&Path], version: &str) -> std::process::Output {
    validator()
        .args(["--strict", "--quiet", "--kubernetes-version", version])
        .args(files)
        .output()
        .expect("kubernetes-validate runs (./dev/test installs it; or set STREAMC_K8S_VALIDATE)")
}

#[test]
#[ignore = "needs kubernetes-validate (./dev/test installs it from PyPI)"]
fn manifests_pass_the_kubernetes_api_schemas() {
    let files = manifests();
    let kinds: Vec<String> = files
        .iter()
        .map(|p| {
            let v: Value = serde_yaml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            v["kind"].as_str().unwrap().to_string()
        })
        .collect();
    for k in ["ConfigMap", "PodDisruptionBudget", "Secret", "Service", "StatefulSet"] {
        assert!(kinds.iter().any(|x| x == k), "no {k} among {kinds:?}");
    }
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    // The oldest Kubernetes release still commonly run, and the newest the validator knows.
    for version in ["1.29.0", "1.37.0"] {
        let o = validate(&paths, version);
        assert!(
            o.status.success(),
            "deploy/k8s against Kubernetes {version}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The validator refuses what it must (so its pass above means something): a misspelt field.
    let dir = std::env::temp_dir().join(format!("streamc-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("statefulset.yaml");
    let text = std::fs::read_to_string(root().join("deploy/k8s/statefulset.yaml")).unwrap();
    assert!(text.contains("  replicas: 3\n"));
    std::fs::write(&bad, text.replace("  replicas: 3\n", "  replica: 3\n")).unwrap();
    let o = validate(&[&bad], "1.37.0");
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && out.contains("replica"), "a misspelt field passed:\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_manifests_run_the_repository_s_program_with_a_valid_configuration() {
    let cm = by_kind("ConfigMap");
    let program = cm["data"]["program.stream"].as_str().unwrap();
    assert_eq!(
        program,
        std::fs::read_to_string(root().join("examples/stats.stream")).unwrap(),
        "deploy/k8s/configmap.yaml's program.stream is examples/stats.stream"
    );

    let sts = by_kind("StatefulSet");
    let spec = &sts["spec"];
    assert_eq!(spec["podManagementPolicy"].as_str(), Some("Parallel"));
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[0], "run");
    let flag = |name: &str| args.iter().position(|a| *a == name).map(|i| args[i + 1]);
    let sets: Vec<&str> = args.windows(2).filter(|w| w[0] == "--set").map(|w| w[1]).collect();
    // `$(VAR)` in args is expanded from the container's env: each one must be defined there.
    let env: Vec<&str> = c["env"].as_sequence().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for a in &args {
        if let Some(rest) = a.split("$(").nth(1) {
            let var = rest.split(')').next().unwrap();
            assert!(env.contains(&var), "{a}: `{var}` is not in the container's env {env:?}");
        }
    }
    assert!(sets.contains(&"instance.id=$(POD_NAME)"), "static membership from the pod name: {args:?}");
    // Interactive queries: each pod advertises its name in the headless Service, on the port
    // it serves.
    let service = by_kind("Service");
    let port = flag("--http-addr").unwrap().rsplit(':').next().unwrap();
    let advertised = format!("application.server=$(POD_NAME).{}:{port}", service["metadata"]["name"].as_str().unwrap());
    assert!(sets.contains(&advertised.as_str()), "{advertised} in {args:?}");

    // The configuration, with the sets as a pod would expand them, loads; the secret's keys
    // parse as trusted keys.
    let secret = by_kind_and_name("Secret", Some("stats-control-keys"));
    let keys = secret["stringData"]["trusted_keys"].as_str().unwrap();
    let dir = std::env::temp_dir().join(format!("streamc-deploy-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_path = dir.join("streamc.yaml");
    std::fs::write(&cfg_path, cm["data"]["streamc.yaml"].as_str().unwrap()).unwrap();
    let expanded: Vec<String> =
        sets.iter().map(|s| s.replace("$(POD_NAME)", "stats-0").replace("$(TRUSTED_KEYS)", keys)).collect();
    // The second configuration file is the Kafka credentials Secret's `kafka.yaml`, mounted
    // where the args read it; as shipped and with its commented example filled in, it merges
    // into the first file's `kafka` section.
    let credentials = by_kind_and_name("Secret", Some("stats-kafka-credentials"));
    let configs: Vec<&str> = args.windows(2).filter(|w| w[0] == "--config").map(|w| w[1]).collect();
    assert_eq!(configs, ["/etc/streamc/streamc.yaml", "/etc/streamc-kafka/kafka.yaml", "/etc/streamc-http/http.yaml"]);
    let mount = mounts_of(c).into_iter().find(|m| m["name"].as_str() == Some("kafka-credentials")).unwrap();
    assert_eq!(mount["mountPath"].as_str(), Some("/etc/streamc-kafka"));
    let volume = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(volume["secret"]["secretName"], credentials["metadata"]["name"]);
    let shipped = credentials["stringData"]["kafka.yaml"].as_str().unwrap();
    let filled: String = shipped
        .lines()
        .filter(|l| *l != "kafka: {}")
        .map(|l| l.strip_prefix("# ").unwrap_or(l).to_string() + "\n")
        .collect();
    let kafka_cfg = dir.join("kafka.yaml");
    for text in [shipped, filled.as_str()] {
        std::fs::write(&kafka_cfg, text).unwrap();
        let cfg = streamc::config::load_files(&[&cfg_path, &kafka_cfg], &expanded).unwrap();
        assert!(cfg.kafka.contains_key("bootstrap.servers"), "the first file's brokers are kept");
        if text == filled {
            assert_eq!(cfg.kafka.get("security.protocol").map(String::as_str), Some("SASL_SSL"));
            assert_eq!(cfg.kafka.get("ssl.ca.location").map(String::as_str), Some("/etc/streamc-kafka/ca.pem"));
        }
    }
    // The third is the HTTP access Secret's `http.yaml`, mounted where the args read it: as
    // shipped it sets nothing; filled in, a token file and TLS files in the same mount.
    let access = by_kind_and_name("Secret", Some("stats-http-access"));
    let mount = mounts_of(c).into_iter().find(|m| m["name"].as_str() == Some("http-access")).unwrap();
    assert_eq!(mount["mountPath"].as_str(), Some("/etc/streamc-http"));
    let volume = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(volume["secret"]["secretName"], access["metadata"]["name"]);
    let shipped = access["stringData"]["http.yaml"].as_str().unwrap();
    let filled: String = shipped
        .lines()
        .filter(|l| *l != "http: {}")
        .map(|l| l.strip_prefix("# ").unwrap_or(l).to_string() + "\n")
        .collect();
    let http_cfg = dir.join("http.yaml");
    for text in [shipped, filled.as_str()] {
        std::fs::write(&http_cfg, text).unwrap();
        let cfg = streamc::config::load_files(&[&cfg_path, &kafka_cfg, &http_cfg], &expanded).unwrap();
        if text == filled {
            assert_eq!(cfg.http.auth.token_file.as_deref(), Some("/etc/streamc-http/token"));
            for (file, key) in
                [(&cfg.http.tls.cert, "tls.crt"), (&cfg.http.tls.key, "tls.key"), (&cfg.http.tls.ca, "ca.pem")]
            {
                assert_eq!(file.as_deref(), Some(format!("/etc/streamc-http/{key}").as_str()));
                assert!(access["stringData"][key].is_string(), "the Secret has {key}");
            }
            assert!(access["stringData"]["token"].is_string());
        } else {
            assert_eq!(cfg.http, streamc::config::HttpConfig::default());
        }
    }
    let cfg = streamc::config::load_files(&[&cfg_path, &kafka_cfg, &http_cfg], &expanded).unwrap();
    assert_eq!(cfg.instance.id.as_deref(), Some("stats-0"));
    assert_eq!(cfg.control.trusted_keys.len(), 1);
    assert!(cfg.kafka.contains_key("bootstrap.servers"), "a Kafka deployment names its brokers");
    assert_eq!(args[1], "/etc/streamc/program.stream");
    let _ = std::fs::remove_dir_all(&dir);

    // The probes are the paths and port streamc serves on --http-addr.
    let addr = flag("--http-addr").expect("--http-addr");
    let port: i64 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let ports = c["ports"].as_sequence().unwrap();
    assert!(ports.iter().any(|p| p["name"].as_str() == Some("http") && p["containerPort"].as_i64() == Some(port)));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"].as_str(), Some("/ready"));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
    // The state directory is the pod's own volume.
    let state = flag("--state-dir").unwrap();
    let mounts = mounts_of(c);
    let claim = mounts.iter().find(|m| m["mountPath"].as_str() == Some(state)).expect("the state dir is mounted");
    let claims = spec["volumeClaimTemplates"].as_sequence().unwrap();
    assert!(claims.iter().any(|t| t["metadata"]["name"] == claim["name"]), "a volume claim per pod for {state}");
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 30);

    let svc = by_kind("Service");
    assert_eq!(svc["spec"]["clusterIP"].as_str(), Some("None"), "headless");
    assert_eq!(svc["spec"]["selector"], spec["selector"]["matchLabels"]);
    assert_eq!(sts["spec"]["serviceName"], svc["metadata"]["name"]);
    let pdb = by_kind("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], spec["selector"]["matchLabels"]);
}

fn mounts_of(container: &Value) -> Vec<&Value> {
    container["volumeMounts"].as_sequence().unwrap().iter().collect()
}

#[test]
#[ignore = "needs a container daemon with the rust:1.95-bookworm and debian:bookworm-slim images: docker build -f deploy/Dockerfile ."]
fn the_container_image_builds_and_runs_the_binary() {
    let tag = format!("streamc-test:{}", std::process::id());
    let o = Command::new("docker")
        .args(["build", "-f", "deploy/Dockerfile", "-t", &tag, "."])
        .current_dir(root())
        .output()
        .expect("docker runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new("docker").args(["run", "--rm", &tag, "--version"]).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("streamc "));
    let _ = Command::new("docker").args(["rmi", &tag]).output();
}
