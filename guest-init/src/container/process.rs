//! The container's first process, once its root is built: its user, its
//! environment, and the command (or a minimal init running it).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::root::build_root;
use super::spec::Spec;
use super::{bad, ctx, status_code};

/// In the container's first process (new mount, PID and IPC namespaces):
/// builds the root, enters it, and execs the command. Returns only on
/// failure.
pub(super) fn enter(node: u16, spec: &Spec) -> io::Error {
    match build_root(node, spec).and_then(|()| {
        let home = become_user(&spec.user)?;
        let env = container_env(spec, &home);
        std::env::set_current_dir(&spec.workdir)
            .map_err(|e| io::Error::new(e.kind(), format!("working directory {}: {e}", spec.workdir)))?;
        if spec.init {
            return Err(run_as_init(&spec.args, &env));
        }
        Err(exec(&spec.args, &env))
    }) {
        Ok(()) => unreachable!("enter returns only errors"),
        Err(e) => e,
    }
}

/// Resolves `spec` (`user`, `uid`, `user:group`, `uid:gid`; empty is root)
/// in the container's /etc/passwd and /etc/group, and becomes that user,
/// with the supplementary groups /etc/group gives it. Returns its home.
pub(super) fn become_user(spec: &str) -> io::Result<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let u = if u.is_empty() { "0" } else { u };
    let entry =
        passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.len() >= 7 && (f[0] == u || f[2] == u));
    let (uid, mut gid, name, home) = match (&entry, u.parse::<u32>()) {
        (Some(f), _) => (
            f[2].parse().map_err(|_| bad(format!("/etc/passwd: bad uid for {u}")))?,
            f[3].parse().map_err(|_| bad(format!("/etc/passwd: bad gid for {u}")))?,
            f[0].to_owned(),
            f[5].to_owned(),
        ),
        (None, Ok(uid)) => (uid, 0, String::new(), "/".to_owned()),
        (None, Err(_)) => return Err(bad(format!("user {u:?} is not in the image's /etc/passwd"))),
    };
    if let Some(g) = g {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| bad(format!("group {g:?} is not in the image's /etc/group")))?,
        };
    }
    let mut groups: Vec<libc::gid_t> = vec![gid];
    if !name.is_empty() {
        for f in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
            if f.len() >= 4 && f[3].split(',').any(|m| m == name) {
                if let Ok(n) = f[2].parse() {
                    if !groups.contains(&n) {
                        groups.push(n);
                    }
                }
            }
        }
    }
    // SAFETY: plain credential system calls with valid arguments.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(ctx(&format!("becoming user {spec:?}"))(io::Error::last_os_error()));
        }
    }
    Ok(home)
}

/// The container's environment as Docker sets it: the image's and the
/// service's (already merged), HOSTNAME, and HOME and PATH if unset.
pub(super) fn container_env(spec: &Spec, home: &str) -> Vec<String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut order = Vec::new();
    let mut set = |k: &str, v: &str, replace: bool| {
        if !env.contains_key(k) {
            order.push(k.to_owned());
        } else if !replace {
            return;
        }
        env.insert(k.to_owned(), v.to_owned());
    };
    set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", true);
    set("HOSTNAME", &spec.hostname, true);
    // The SDK channel, under both names SDKs look for (a service may say
    // otherwise).
    set("HVSIM_SDK_OUTPUT", crate::sdk::SDK_PATH, true);
    set("ANTITHESIS_SDK_LOCAL_OUTPUT", crate::sdk::SDK_PATH, true);
    set("ANTITHESIS_STOP_FAULTS", crate::sdk::STOP_FAULTS, true);
    for e in &spec.env {
        let (k, v) = e.split_once('=').unwrap_or((e, ""));
        set(k, v, true);
    }
    set("HOME", if home.is_empty() { "/" } else { home }, false);
    order.iter().map(|k| format!("{k}={}", env[k])).collect()
}

/// Execs `args` with `env`, finding the program on the environment's PATH.
pub(super) fn exec(args: &[String], env: &[String]) -> io::Error {
    let path = env.iter().find_map(|e| e.strip_prefix("PATH=")).unwrap_or("/usr/bin:/bin");
    let program = if args[0].contains('/') {
        PathBuf::from(&args[0])
    } else {
        match path.split(':').map(|d| Path::new(d).join(&args[0])).find(|p| is_executable(p)) {
            Some(p) => p,
            None => return io::Error::new(io::ErrorKind::NotFound, format!("{}: not found on PATH {path}", args[0])),
        }
    };
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let argv: Vec<CString> = args.iter().map(|a| c(a)).collect();
    let envp: Vec<CString> = env.iter().map(|e| c(e)).collect();
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let prog = CString::new(program.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: NUL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execve(prog.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("cannot run {}: {e}", program.display()))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `init: true`: stays PID 1, runs the command as its child, forwards
/// termination signals to it, reaps every orphan, and exits with its
/// status (as Docker's tini does).
fn run_as_init(args: &[String], env: &[String]) -> io::Error {
    // SAFETY: this process is single-threaded.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return io::Error::last_os_error();
    }
    if child == 0 {
        let e = exec(args, env);
        eprintln!("hvsim-init: {e}");
        // SAFETY: the child ends here if it could not exec.
        unsafe { libc::_exit(127) };
    }
    FORWARD_TO.store(child, std::sync::atomic::Ordering::SeqCst);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: installing a handler that only calls kill.
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid into a local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == child {
            // SAFETY: ending PID 1 of the container with the child's status.
            unsafe { libc::_exit(i32::from(status_code(status))) };
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return io::Error::last_os_error();
        }
    }
}

static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    // SAFETY: kill is async-signal-safe.
    unsafe { libc::kill(FORWARD_TO.load(std::sync::atomic::Ordering::SeqCst), sig) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::spec::tests::field;
    use hvsim_abi::container::key;

    #[test]
    fn the_environment_is_dockers() {
        let mut b = Vec::new();
        field(&mut b, key::NAME, "db");
        field(&mut b, key::HOSTNAME, "db1");
        field(&mut b, key::IMAGE_DISK, "0");
        field(&mut b, key::ARG, "x");
        field(&mut b, key::ENV, "PATH=/opt/bin");
        field(&mut b, key::ENV, "HOME=/srv");
        field(&mut b, key::ENV, "EMPTY");
        let env = container_env(&Spec::parse(&b).unwrap(), "/root");
        let sdk = crate::sdk::SDK_PATH;
        let want = [
            "PATH=/opt/bin".to_owned(),
            "HOSTNAME=db1".into(),
            format!("HVSIM_SDK_OUTPUT={sdk}"),
            format!("ANTITHESIS_SDK_LOCAL_OUTPUT={sdk}"),
            format!("ANTITHESIS_STOP_FAULTS={}", crate::sdk::STOP_FAULTS),
            "HOME=/srv".into(),
            "EMPTY=".into(),
        ];
        assert_eq!(env, want);
    }
}
