//! examples/scale: the files that run a sharded exploration on Kubernetes,
//! Slurm and GitHub Actions (docs/scale.md). The Kubernetes manifests are
//! checked against the API's own schema (vendored in
//! examples/scale/kubernetes/schema/, strict: an unknown or misspelled field
//! fails) and for what makes the shards one exploration; the workflow's
//! matrix against its shard count; every script parses and passes
//! shellcheck; and the scripts are run against a
//! stand-in hvsim that records its arguments. Then the Slurm scripts run on
//! a real Slurm cluster of one node (Debian's slurmctld, slurmd and munge,
//! started by the test on loopback) with the real hvsim.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::{json, Value};

fn scale() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scale")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every document of a YAML file, as JSON; empty documents left out.
fn documents(path: &Path) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(&read(path))
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// The vendored schema of a Kubernetes object's kind (schema/README.md).
fn schema_of(object: &Value) -> Value {
    let file = match (object["apiVersion"].as_str(), object["kind"].as_str()) {
        (Some("batch/v1"), Some("Job")) => "job-batch-v1.json",
        (Some("v1"), Some("PersistentVolumeClaim")) => "persistentvolumeclaim-v1.json",
        (version, kind) => panic!(
            "no schema for {version:?} {kind:?} in examples/scale/kubernetes/schema/: vendor it (schema/README.md)"
        ),
    };
    serde_json::from_str(&read(&scale().join("kubernetes/schema").join(file))).unwrap()
}

/// The schema's violations by `object`, one line each.
fn violations(object: &Value) -> Vec<String> {
    let schema = schema_of(object);
    let validator = jsonschema::validator_for(&schema).expect("the vendored schema compiles");
    validator
        .iter_errors(object)
        .map(|e| {
            let message: String = e.to_string().chars().take(200).collect();
            format!("at {:?}: {message}", e.instance_path().to_string())
        })
        .collect()
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().expect("every object is named")
}

/// The documents of every Kubernetes manifest shipped, with the file each
/// came from.
fn manifests() -> Vec<(String, Value)> {
    let dir = scale().join("kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifest in {}", dir.display());
    files.iter().flat_map(|f| documents(f).into_iter().map(move |d| (f.display().to_string(), d))).collect()
}

/// The only container of a Job's pod.
fn container(job: &Value) -> &Value {
    let containers = job["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "job {}: one container", name(job));
    &containers[0]
}

/// A container's environment variable's value.
fn env<'a>(job: &'a Value, var: &str) -> Option<&'a str> {
    container(job)["env"].as_array()?.iter().find(|e| e["name"] == var).and_then(|e| e["value"].as_str())
}

/// The pod volume a container mounts at `path`.
fn volume_at<'a>(job: &'a Value, path: &str) -> Option<&'a Value> {
    let mount = container(job)["volumeMounts"].as_array()?.iter().find(|m| m["mountPath"] == path)?;
    let volumes = job["spec"]["template"]["spec"]["volumes"].as_array()?;
    volumes.iter().find(|v| v["name"] == mount["name"])
}

#[test]
fn kubernetes_manifests_match_the_job_api_schema() {
    let all = manifests();
    for (file, object) in &all {
        let broken = violations(object);
        assert!(broken.is_empty(), "{file}: {} {}:\n{}", object["kind"], name(object), broken.join("\n"));
    }

    let jobs: Vec<&Value> = all.iter().map(|(_, o)| o).filter(|o| o["kind"] == "Job").collect();
    let by_component = |c: &str| -> &Value {
        let found: Vec<&&Value> =
            jobs.iter().filter(|j| j["metadata"]["labels"]["app.kubernetes.io/component"] == c).collect();
        assert_eq!(found.len(), 1, "one {c} Job (labelled app.kubernetes.io/component: {c}, which run.sh selects)");
        found[0]
    };
    let (root, shards, merge) = (by_component("root"), by_component("shards"), by_component("merge"));
    assert_eq!(jobs.len(), 3, "a root, a shard and a merge Job");

    // The shards are an Indexed Job of HVSIM_SHARDS completions, each index
    // retried on its own.
    let spec = &shards["spec"];
    assert_eq!(spec["completionMode"], "Indexed", "shard.sh reads JOB_COMPLETION_INDEX");
    let count: u64 = env(shards, "HVSIM_SHARDS").expect("the shard Job sets HVSIM_SHARDS").parse().unwrap();
    assert_eq!(spec["completions"], json!(count), "completions must be HVSIM_SHARDS, or shards go missing");
    assert_eq!(spec["parallelism"], json!(count), "every shard at once");
    assert!(spec["backoffLimitPerIndex"].is_u64(), "a failed shard is retried on its own");

    // The root and the shards open /dev/kvm: the node's device, and the
    // privilege (or device plugin) to open it.
    for job in [root, shards] {
        let kvm = volume_at(job, "/dev/kvm").unwrap_or_else(|| panic!("job {} mounts no /dev/kvm", name(job)));
        assert_eq!(kvm["hostPath"], json!({"path": "/dev/kvm", "type": "CharDevice"}), "job {}", name(job));
        let privileged = container(job)["securityContext"]["privileged"] == true;
        let plugin = !container(job)["resources"]["limits"]["devices.kubevirt.io/kvm"].is_null();
        assert!(privileged || plugin, "job {}: /dev/kvm is mounted but cannot be opened", name(job));
        // podFailurePolicy and backoffLimitPerIndex need it, and a shard is
        // retried by the Job, not in place.
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never", "job {}", name(job));
    }
    // The root the shards start from is the one the root step made: the
    // same seed and target, on the same pool of nodes.
    for var in ["HVSIM_SEED", "HVSIM_TARGET_ARGS"] {
        assert_eq!(env(root, var), env(shards, var), "{var}: the root step's and the shards' differ");
    }
    let pool = |j: &Value| j["spec"]["template"]["spec"]["nodeSelector"].clone();
    assert_eq!(pool(root), pool(shards), "the root and the shards on one machine type");
    assert!(!pool(shards).is_null(), "the shards name their pool of nodes");

    // One results volume: the same claim in every Job, mounted where
    // HVSIM_RESULTS says.
    let claims: Vec<&Value> = all.iter().map(|(_, o)| o).filter(|o| o["kind"] == "PersistentVolumeClaim").collect();
    assert_eq!(claims.len(), 1, "one claim for the results");
    let claim = claims[0];
    assert!(
        claim["spec"]["accessModes"].as_array().unwrap().contains(&json!("ReadWriteMany")),
        "the shards write to the claim at once, from several nodes"
    );
    for job in [root, shards, merge] {
        let at = env(job, "HVSIM_RESULTS").unwrap_or_else(|| panic!("job {} sets no HVSIM_RESULTS", name(job)));
        let volume = volume_at(job, at).unwrap_or_else(|| panic!("job {}: nothing mounted at {at}", name(job)));
        assert_eq!(volume["persistentVolumeClaim"]["claimName"].as_str(), Some(name(claim)), "job {}", name(job));
    }

    // Each Job runs its script from the ConfigMap that run.sh makes from the
    // files in examples/scale/.
    let run = read(&scale().join("kubernetes/run.sh"));
    for (job, script) in [(root, "root.sh"), (shards, "shard.sh"), (merge, "merge.sh")] {
        let command: Vec<&str> =
            container(job)["command"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
        let path = Path::new(command[command.len() - 1]);
        assert_eq!(path.file_name().unwrap(), script, "job {}: {command:?}", name(job));
        let scripts = volume_at(job, path.parent().unwrap().to_str().unwrap()).expect("the scripts' volume");
        let map = scripts["configMap"]["name"].as_str().expect("the scripts come from a ConfigMap");
        assert!(run.contains(&format!("create configmap {map} ")), "run.sh makes the ConfigMap {map}");
        for file in [script, "common.sh"] {
            assert!(scale().join(file).is_file());
            assert!(run.contains(&format!("--from-file=\"$scale/{file}\"")), "run.sh puts {file} in {map}");
        }
    }
}

/// The schema bites: a misspelled field, at the top of a Job's spec or deep
/// in its pod, is refused.
#[test]
fn the_schema_refuses_a_misspelled_field() {
    let shards = manifests()
        .into_iter()
        .map(|(_, o)| o)
        .find(|o| o["kind"] == "Job" && o["spec"]["completionMode"] == "Indexed")
        .expect("the shard Job");
    assert!(violations(&shards).is_empty());

    let mut misspelled = shards.clone();
    let spec = misspelled["spec"].as_object_mut().unwrap();
    let mode = spec.remove("completionMode").unwrap();
    spec.insert("completionsMode".into(), mode);
    let broken = violations(&misspelled);
    assert!(broken.iter().any(|v| v.contains("completionsMode")), "{broken:?}");

    let mut deep = shards.clone();
    let c = deep["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap();
    let mounts = c.remove("volumeMounts").unwrap();
    c.insert("volumeMount".into(), mounts);
    let broken = violations(&deep);
    assert!(broken.iter().any(|v| v.contains("volumeMount")), "{broken:?}");

    let mut wrong_type = shards;
    wrong_type["spec"]["completions"] = json!("4");
    assert!(!violations(&wrong_type).is_empty(), "completions is an integer");
}

#[test]
fn the_workflow_has_a_job_per_shard_and_merges_after_them() {
    let path = scale().join("ci/github-actions.yml");
    let docs = documents(&path);
    assert_eq!(docs.len(), 1);
    let workflow = &docs[0];
    let count = match &workflow["env"]["HVSIM_SHARDS"] {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => s.parse().unwrap(),
        other => panic!("HVSIM_SHARDS: {other}"),
    };
    let jobs = &workflow["jobs"];
    let shards = &jobs["shards"];
    let matrix: Vec<u64> = shards["strategy"]["matrix"]["shard"]
        .as_array()
        .expect("a matrix of shards")
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(matrix, (0..count).collect::<Vec<_>>(), "one matrix job per shard, 0 to HVSIM_SHARDS-1");
    assert_eq!(shards["strategy"]["fail-fast"], false, "a failed shard must not cancel the others");
    assert_eq!(shards["needs"], "root");
    assert_eq!(jobs["merge"]["needs"], "shards");
    let runs = |job: &Value| -> String {
        job["steps"].as_array().unwrap().iter().filter_map(|s| s["run"].as_str()).collect::<Vec<_>>().join("\n")
    };
    assert!(runs(&jobs["root"]).contains("examples/scale/root.sh"));
    assert!(runs(shards).contains("examples/scale/shard.sh ${{ matrix.shard }}"));
    assert!(runs(&jobs["merge"]).contains("examples/scale/merge.sh"));
}

/// Every script of examples/scale, with the .sbatch.
fn scripts() -> Vec<PathBuf> {
    // The CI steps too (examples/ci: explore.sh, the GitHub Action's step).
    let mut out: Vec<PathBuf> = [scale(), scale().join("../ci")]
        .iter()
        .flat_map(|d| common::files_under(d))
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("sh" | "sbatch")))
        .collect();
    out.sort();
    out
}

#[test]
fn every_script_parses_and_passes_shellcheck() {
    let all = scripts();
    let names: BTreeSet<String> = all.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for expected in ["common.sh", "root.sh", "shard.sh", "merge.sh", "run.sh", "explore.sbatch", "submit.sh"] {
        assert!(names.contains(expected), "{expected} in examples/scale: {names:?}");
    }
    for script in &all {
        let o = Command::new("sh").arg("-n").arg(script).output().unwrap();
        assert!(o.status.success(), "sh -n {}: {}", script.display(), String::from_utf8_lossy(&o.stderr));
    }
    // shellcheck (Debian's `shellcheck`, which ci/test.sh installs).
    if Command::new("shellcheck").arg("--version").output().is_err() {
        common::skipping("shellcheck is not installed", false);
        return;
    }
    for script in &all {
        let o = Command::new("shellcheck")
            .args(["-x", "--shell=sh"])
            .arg(script.file_name().unwrap())
            .current_dir(script.parent().unwrap())
            .output()
            .unwrap();
        assert!(o.status.success(), "shellcheck {}:\n{}", script.display(), String::from_utf8_lossy(&o.stdout));
    }
}

/// A stand-in for hvsim: writes its arguments, one a line, to
/// $STUB_ARGS and exits with $STUB_STATUS.
fn stub(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("hvsim");
    std::fs::write(&path, "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$STUB_ARGS\"\nexit \"${STUB_STATUS:-0}\"\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
    /// The arguments hvsim got (empty when it did not run).
    args: Vec<String>,
}

/// `sh SCRIPT ARGS` with the stand-in hvsim exiting `status`, the results in
/// `dir`/results, and `vars` set (the engines' variables cleared first).
fn script(dir: &Path, name: &str, args: &[&str], vars: &[(&str, &str)], status: i32) -> Run {
    let record = dir.join("args");
    let _ = std::fs::remove_file(&record);
    let mut c = Command::new("sh");
    c.arg(scale().join(name)).args(args).current_dir(dir);
    for var in ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "HVSIM_SHARDS"] {
        c.env_remove(var);
    }
    for var in ["HVSIM_SEED", "HVSIM_BRANCHES", "HVSIM_TARGET_ARGS", "HVSIM_EXTRA_ARGS", "HVSIM_MERGED"] {
        c.env_remove(var);
    }
    c.env("HVSIM", stub(dir)).env("HVSIM_RESULTS", dir.join("results")).env("STUB_ARGS", &record);
    c.env("STUB_STATUS", status.to_string());
    c.envs(vars.iter().copied());
    let o: Output = c.output().unwrap();
    Run {
        status: o.status.code().expect("exited"),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        args: std::fs::read_to_string(&record).map(|s| s.lines().map(String::from).collect()).unwrap_or_default(),
    }
}

/// The value after `flag` in hvsim's arguments.
fn flag<'a>(run: &'a Run, flag: &str) -> Option<&'a str> {
    run.args.iter().position(|a| a == flag).map(|i| run.args[i + 1].as_str())
}

#[test]
fn shard_sh_finds_its_index_counts_a_bug_as_a_result_and_passes_failures_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let results = d.join("results");
    let results = results.to_str().unwrap();

    // A bug (8) is the shard's result: the job succeeds.
    let r = script(d, "shard.sh", &["1"], &[("HVSIM_SHARDS", "2")], 8);
    assert_eq!(r.status, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("shard 1/2: found a bug"), "{}", r.stdout);
    assert_eq!(r.args[0], "explore");
    assert_eq!(flag(&r, "--shard"), Some("1/2"));
    assert_eq!(flag(&r, "--seed"), Some("1"));
    assert_eq!(flag(&r, "--branches"), Some("200"), "the whole exploration's budget");
    assert_eq!(flag(&r, "--roots"), Some(format!("{results}/roots").as_str()));
    assert_eq!(flag(&r, "--out"), Some(format!("{results}/shard-1").as_str()));
    // Any other failure is passed on.
    for status in [1, 2, 9, 10, 137] {
        let r = script(d, "shard.sh", &["0"], &[("HVSIM_SHARDS", "2")], status);
        assert_eq!(r.status, status, "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
    assert_eq!(script(d, "shard.sh", &["0"], &[("HVSIM_SHARDS", "2")], 0).status, 0);

    // The index: the argument, else Kubernetes', else Slurm's.
    let engines = [("HVSIM_SHARDS", "4"), ("JOB_COMPLETION_INDEX", "2"), ("SLURM_ARRAY_TASK_ID", "3")];
    assert_eq!(flag(&script(d, "shard.sh", &["1"], &engines, 0), "--shard"), Some("1/4"));
    assert_eq!(flag(&script(d, "shard.sh", &[], &engines, 0), "--shard"), Some("2/4"));
    assert_eq!(flag(&script(d, "shard.sh", &[], &[engines[0], engines[2]], 0), "--shard"), Some("3/4"));

    // Settings, with the target's words quoted as in a shell, and
    // arguments after the index passed on.
    let vars = [
        ("HVSIM_SHARDS", "3"),
        ("HVSIM_SEED", "7"),
        ("HVSIM_BRANCHES", "1000"),
        ("HVSIM_TARGET_ARGS", "--linux --init-cmd 'echo a  b'"),
        ("HVSIM_EXTRA_ARGS", "--workers 2"),
    ];
    let r = script(d, "shard.sh", &["2", "--json"], &vars, 0);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(flag(&r, "--init-cmd"), Some("echo a  b"));
    assert_eq!(
        (flag(&r, "--seed"), flag(&r, "--branches"), flag(&r, "--workers")),
        (Some("7"), Some("1000"), Some("2"))
    );
    assert!(r.args.contains(&"--json".to_string()) && r.args.contains(&"--linux".to_string()), "{:?}", r.args);

    // Mistakes: one line naming what is wrong, status 2, hvsim not run.
    for (args, vars, says) in [
        (&[][..], &[("HVSIM_SHARDS", "2")][..], "no shard index"),
        (&["0"][..], &[][..], "HVSIM_SHARDS is not set"),
        (&["2"][..], &[("HVSIM_SHARDS", "2")][..], "shard 2 of 2: shards are numbered from 0 to 1"),
        (&["x"][..], &[("HVSIM_SHARDS", "2")][..], "the shard index must be a whole number"),
        (&["0"][..], &[("HVSIM_SHARDS", "2"), ("HVSIM_SEED", "-1")][..], "HVSIM_SEED must be a whole number"),
        (&["0"][..], &[("HVSIM_SHARDS", "2"), ("HVSIM", "/nonexistent/hvsim")][..], "no hvsim binary"),
    ] {
        let r = script(d, "shard.sh", args, vars, 0);
        assert_eq!(r.status, 2, "{says}: {}", r.stderr);
        assert!(r.stderr.starts_with("shard.sh: ") && r.stderr.contains(says), "{says}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(r.args.is_empty(), "{says}: hvsim ran: {:?}", r.args);
    }
}

#[test]
fn root_sh_takes_the_root_and_merge_sh_merges_what_the_shards_left() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let results = d.join("results");

    let r = script(d, "root.sh", &[], &[("HVSIM_SEED", "3"), ("HVSIM_TARGET_ARGS", "--guest demo")], 0);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert_eq!(r.args[..3], ["explore", "--guest", "demo"]);
    assert_eq!((flag(&r, "--seed"), flag(&r, "--branches")), (Some("3"), Some("0")));
    assert_eq!(flag(&r, "--roots"), Some(results.join("roots").to_str().unwrap()));
    assert!(results.join("roots").is_dir());
    // A bug before setup complete leaves no root: the step fails.
    assert_eq!(script(d, "root.sh", &[], &[], 8).status, 8);

    // No shard has results yet.
    let r = script(d, "merge.sh", &[], &[], 0);
    assert_eq!(r.status, 2);
    assert!(r.stderr.contains("no shard results"), "{}", r.stderr);
    // Shard 0 and 2 wrote an exploration; shard 1 failed after making its
    // directory (hvsim leaves error.txt there), shard 3 before.
    for i in [0, 1, 2, 3] {
        std::fs::create_dir_all(results.join(format!("shard-{i}"))).unwrap();
    }
    for i in [0, 1, 2] {
        let exploration = results.join(format!("shard-{i}/20261125T170102Z-demo-seed1"));
        std::fs::create_dir(&exploration).unwrap();
        let file = if i == 1 { "error.txt" } else { "exploration.json" };
        std::fs::write(exploration.join(file), "").unwrap();
        std::os::unix::fs::symlink(exploration.file_name().unwrap(), results.join(format!("shard-{i}/latest")))
            .unwrap();
    }
    for status in [0, 8, 1] {
        let r = script(d, "merge.sh", &[], &[], status);
        assert_eq!(r.status, status, "the merge's status is passed on: {}", r.stderr);
        let latest = |i: u32| results.join(format!("shard-{i}/latest")).to_str().unwrap().to_owned();
        let merged = results.join("merged").to_str().unwrap().to_owned();
        assert_eq!(r.args, ["merge".to_owned(), latest(0), latest(2), "--out".to_owned(), merged]);
        for i in [1, 3] {
            assert!(r.stderr.contains(&format!("shard-{i} holds no finished exploration")), "{}", r.stderr);
        }
    }
    let r = script(d, "merge.sh", &["--json"], &[("HVSIM_MERGED", "elsewhere")], 0);
    assert_eq!((r.args[1].as_str(), flag(&r, "--out")), ("--json", Some("elsewhere")));
}

/// The array's default size and the shard count explore.sbatch assumes
/// agree (submit.sh sets both from HVSIM_SHARDS).
#[test]
fn the_slurm_array_matches_its_shard_count() {
    let sbatch = read(&scale().join("slurm/explore.sbatch"));
    let array = sbatch.lines().find_map(|l| l.strip_prefix("#SBATCH --array=")).expect("#SBATCH --array=");
    let (first, last) = array.split_once('-').expect("a range");
    assert_eq!(first, "0", "shards are numbered from 0");
    let shards: u64 = last.parse::<u64>().unwrap() + 1;
    assert!(sbatch.contains(&format!("HVSIM_SHARDS=${{HVSIM_SHARDS:-{shards}}}")), "--array={array}");
    let submit = read(&scale().join("slurm/submit.sh"));
    for needle in ["--parsable", "--array=\"0-$((HVSIM_SHARDS - 1))\"", "afterok:$root", "afterany:$shards"] {
        assert!(submit.contains(needle), "submit.sh: {needle}");
    }
}

/// A Slurm cluster of one node on loopback: munged, slurmctld and slurmd
/// with a configuration of their own (free ports, state in `dir`), ended
/// on drop.
struct Slurm {
    daemons: Vec<std::process::Child>,
    conf: PathBuf,
}

impl Slurm {
    fn start(dir: &Path) -> Slurm {
        use std::os::unix::fs::PermissionsExt;
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (ctld_port, slurmd_port) = (free(), free());
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let key = dir.join("munge.key");
        std::fs::write(&key, (0..1024).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>()).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = dir.join("munge.sock");
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::fs::write(
            &conf,
            format!(
                "ClusterName=hvsimtest\nSlurmctldHost=localhost\nSlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\n\
                 AuthType=auth/munge\nAuthInfo=socket={}\nCredType=cred/munge\nSlurmUser=root\nSlurmdUser=root\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
                 SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
                 SwitchType=switch/none\nMpiDefault=none\nReturnToService=2\nSchedulerType=sched/backfill\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 NodeName=localhost CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
                socket.display()
            ),
        )
        .unwrap();
        let spawn = |program: &str, args: &[String]| {
            Command::new(program)
                .args(args)
                .env("SLURM_CONF", &conf)
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("{program}.err"))).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("{program}: {e}"))
        };
        let mut daemons = vec![spawn(
            "munged",
            &[
                "--foreground".into(),
                "--force".into(),
                format!("--socket={}", socket.display()),
                format!("--key-file={}", key.display()),
                format!("--log-file={d}/munged.log"),
                format!("--pid-file={d}/munged.pid"),
                format!("--seed-file={d}/munged.seed"),
            ],
        )];
        wait_until("munged's socket", || socket.exists());
        daemons.push(spawn("slurmctld", &["-D".into(), "-i".into()]));
        daemons.push(spawn("slurmd", &["-D".into(), "-N".into(), "localhost".into()]));
        let slurm = Slurm { daemons, conf };
        wait_until("the node to be idle", || {
            let o = slurm.command("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim() == "idle"
        });
        slurm
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().rev() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "waited 5 minutes for {what}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// submit.sh on a real Slurm cluster (one node): the root step, an array of
/// two shards after it and the merge after them run as Slurm schedules
/// them, with the real hvsim on the demo; the merged report holds both
/// shards' branches, and the merge job says what it found.
#[test]
fn a_real_slurm_cluster_runs_the_root_the_shard_array_and_the_merge() {
    for tool in ["slurmctld", "slurmd", "sbatch", "munged"] {
        if Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map_or(true, |o| !o.status.success())
        {
            common::skipping(
                &format!("{tool} is not installed (Debian's slurmctld, slurmd, slurm-client, munge)"),
                false,
            );
            return;
        }
    }
    if !common::kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let slurm = Slurm::start(&dir.path().join("slurm"));
    let results = dir.path().join("results");
    let o = slurm
        .command("sh")
        .arg(scale().join("slurm/submit.sh"))
        .env("HVSIM", assert_cmd::cargo::cargo_bin("hvsim"))
        .env("HVSIM_RESULTS", &results)
        .env("HVSIM_SHARDS", "2")
        .env("HVSIM_SEED", "9")
        .env("HVSIM_BRANCHES", "200")
        .env(common::SCHEMA_CHECK, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "submit.sh: {said}{}", String::from_utf8_lossy(&o.stderr));
    assert!(said.contains("root step: job") && said.contains("array job") && said.contains("merge: job"), "{said}");
    wait_until("the jobs to end", || {
        let o = slurm.command("squeue").args(["-h", "-o", "%i"]).output().unwrap();
        o.status.success() && String::from_utf8_lossy(&o.stdout).trim().is_empty()
    });
    let outputs: Vec<PathBuf> = std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().path()).collect();
    let output_of = |prefix: &str| {
        let files: Vec<&PathBuf> = outputs
            .iter()
            .filter(|p| p.is_file() && p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        files.iter().map(|p| read(p)).collect::<Vec<String>>()
    };
    assert_eq!(output_of("shard-").len(), 2, "two array tasks ran: {outputs:?}");
    let report: Value = serde_json::from_str(&read(&results.join("merged/report.json"))).unwrap();
    assert_eq!(report["summary"]["shards"], json!({"count": 2, "indices": [0, 1]}), "{}", report["summary"]);
    assert_eq!(report["summary"]["branches"], json!(200));
    // The merge job's verdict is the merged report's.
    let merge = output_of("merge-").concat();
    let verdict = match report["bugs"].as_array().unwrap().len() {
        0 => "merge.sh: merged 2 shard(s), no bug",
        _ => "merge.sh: merged 2 shard(s), bugs found (exit status 8)",
    };
    assert!(merge.contains(verdict), "{merge}");
}
