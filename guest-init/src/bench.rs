//! `/init bench OP N [ARG]`: the micro-workloads of `hvsim bench guest`.
//! The same code runs in the guest and on the host, so the two are
//! measured doing exactly the same thing. Each OP runs N times between two
//! marks; in the guest the marks are messages on `/dev/hvsim` (hvsim takes
//! wall time when it receives them: the guest's own clock is virtual), and
//! everywhere the tool prints `bench OP N NANOS` by its own clock.
//!
//! OPs: `syscall` (getppid), `clock` (`clock_gettime(CLOCK_MONOTONIC)`,
//! through the vDSO where the kernel offers one), `fault` (first touch of a
//! fresh anonymous page), `fork` (fork, child exits, wait), `exec PROG` (fork, exec PROG,
//! wait), `tcp [ADDR]` (a 1-byte round trip on one connection; without
//! ADDR, to a server forked on loopback), `tcp-serve PORT` (echo server for
//! one connection, for `tcp` from another node). `clock-spin MS` is not
//! a benchmark: it reads the clock until MS milliseconds have passed by it
//! and prints how many reads that took (a program that spins on the clock
//! must see time move).

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const LOOPBACK_PORT: u16 = 7071;

pub fn main(args: &[String]) -> ExitCode {
    let op = args.first().map(String::as_str).unwrap_or("");
    let n: Option<u64> = args.get(1).and_then(|n| n.parse().ok());
    let result = match (op, n) {
        ("clock-spin", Some(ms)) => {
            clock_spin(ms);
            Ok(())
        }
        ("tcp-serve", _) => match args.get(1).and_then(|p| p.parse().ok()) {
            Some(port) => serve(port),
            None => Err("usage: /init bench tcp-serve PORT".into()),
        },
        (_, None) => Err("usage: /init bench syscall|fault|fork|exec|tcp N [PROG|ADDR]".to_owned()),
        (op, Some(n)) => measure(op, n, args.get(2).map(String::as_str)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn measure(op: &str, n: u64, arg: Option<&str>) -> Result<(), String> {
    // Set-up outside the marks: the program to exec, the connection.
    let mut run: Box<dyn FnMut() -> Result<(), String>> = match op {
        "syscall" => Box::new(|| {
            // SAFETY: getppid has no arguments and cannot fail.
            unsafe { libc::syscall(libc::SYS_getppid) };
            Ok(())
        }),
        "clock" => Box::new(|| {
            monotonic_ns();
            Ok(())
        }),
        "fault" => {
            let len = usize::try_from(n).map_err(|e| e.to_string())? * 4096;
            // SAFETY: a fresh private anonymous mapping, checked below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(format!("mmap of {len} bytes: {}", std::io::Error::last_os_error()));
            }
            let mut page = 0usize;
            Box::new(move || {
                // SAFETY: page < n, so the byte lies inside the mapping.
                unsafe { base.cast::<u8>().add(page * 4096).write_volatile(1) };
                page += 1;
                Ok(())
            })
        }
        "fork" => Box::new(|| spawn_and_wait(None)),
        "exec" => {
            let prog = arg.ok_or("exec needs a program")?;
            let prog = CString::new(prog).map_err(|e| e.to_string())?;
            Box::new(move || spawn_and_wait(Some(&prog)))
        }
        "tcp" => {
            let mut stream = match arg {
                Some(addr) => connect(addr)?,
                None => {
                    fork_server()?;
                    connect(&format!("127.0.0.1:{LOOPBACK_PORT}"))?
                }
            };
            Box::new(move || {
                let mut byte = [7u8];
                stream.write_all(&byte).map_err(|e| format!("send: {e}"))?;
                stream.read_exact(&mut byte).map_err(|e| format!("receive: {e}"))
            })
        }
        other => return Err(format!("unknown operation `{other}`")),
    };
    mark(&format!("bench start {op}"));
    let started = Instant::now();
    for _ in 0..n {
        run()?;
    }
    let elapsed = started.elapsed();
    mark(&format!("bench end {op}"));
    drop(run);
    if op == "tcp" && arg.is_none() {
        reap();
    }
    println!("bench {op} {n} {}", elapsed.as_nanos());
    Ok(())
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads the clock until `ms` milliseconds have passed by it; never goes
/// backwards.
fn clock_spin(ms: u64) {
    let start = monotonic_ns();
    let (mut last, mut reads) = (start, 0u64);
    while last - start < ms * 1_000_000 {
        let now = monotonic_ns();
        assert!(now >= last, "the clock went back from {last} to {now}");
        last = now;
        reads += 1;
    }
    println!("clock-spin {ms} ms: {reads} reads");
}

/// Sends a mark to hvsim, if there is one to receive it.
fn mark(text: &str) {
    if let Ok(mut dev) = std::fs::OpenOptions::new().write(true).open("/dev/hvsim") {
        let _ = dev.write_all(text.as_bytes());
    }
}

/// Forks; the child exits at once or execs `prog`; waits for it.
fn spawn_and_wait(prog: Option<&CString>) -> Result<(), String> {
    // SAFETY: the child calls only async-signal-safe functions (execv, _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        if let Some(prog) = prog {
            let argv = [prog.as_ptr(), std::ptr::null()];
            // SAFETY: argv is a NULL-terminated array of C strings.
            unsafe { libc::execv(prog.as_ptr(), argv.as_ptr()) };
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(127) };
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: pid is our child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("the child ended with status {status:#x} (exec failed?)"));
    }
    Ok(())
}

fn fork_server() -> Result<(), String> {
    // The listener is bound before the fork, so the parent's connect never
    // races the child's start.
    let listener = TcpListener::bind(("127.0.0.1", LOOPBACK_PORT)).map_err(|e| format!("bind: {e}"))?;
    // SAFETY: the child only serves the connection and exits.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            let code = i32::from(echo(&listener).is_err());
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(code) }
        }
        _ => Ok(()),
    }
}

fn reap() {
    let mut status = 0;
    // SAFETY: waits for any child of ours.
    unsafe { libc::wait(&mut status) };
}

fn serve(port: u16) -> Result<(), String> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("bind: {e}"))?;
    echo(&listener)
}

/// Echoes every byte of one connection until it closes.
fn echo(listener: &TcpListener) -> Result<(), String> {
    let (mut stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    let _ = stream.set_nodelay(true);
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(k) => stream.write_all(&buf[..k]).map_err(|e| format!("echo: {e}"))?,
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// Connects to `addr`, retrying while the server starts (another node's).
fn connect(addr: &str) -> Result<TcpStream, String> {
    let mut last = String::new();
    for _ in 0..500 {
        match TcpStream::connect(addr) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("connect to {addr}: {last}"))
}
