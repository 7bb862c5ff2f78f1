//! Services' virtual addresses (Kubernetes ClusterIPs), as kube-proxy's
//! userspace mode served them: every node runs a proxy in its own network
//! namespace that listens on each Service's address and port and relays
//! each connection it accepts to one of the pods behind it that is ready
//! (`hvsim_abi::linux::SERVICES`).
//!
//! The addresses are in 127.0.0.0/8, which the kernel delivers locally in
//! every namespace: no interface, route or netfilter rule is needed, and a
//! pod's connection to a Service stays on its own node until the proxy
//! opens one to the chosen pod, through the network hvsim partitions.
//!
//! Which pod: round robin over the ready ones, counted per Service port and
//! started at the node's own number, so that clients on different nodes
//! begin on different pods; every choice is a function of the order
//! connections arrive in, which the machine decides deterministically. With
//! no pod ready, the connection is reset.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};

use super::{bad, state_dir};

/// When a pod behind a Service takes connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Started,
    Healthy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Backend {
    node: u16,
    port: u16,
    when: When,
}

impl Backend {
    fn ready(&self) -> bool {
        // `pid` is there while its container runs, `healthy` while it
        // also passes its readiness check.
        let marker = match self.when {
            When::Started => "pid",
            When::Healthy => "healthy",
        };
        state_dir(self.node).join(marker).exists()
    }
}

/// One Service port: where it listens and the pods behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Route {
    listen: SocketAddrV4,
    backends: Vec<Backend>,
    /// Nodes whose pod serves the port number itself: no listener there.
    own: Vec<u16>,
}

/// The routes of `SERVICES`' text (untrusted: parsed strictly).
fn parse(text: &str) -> io::Result<Vec<Route>> {
    let mut routes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let listen = words.next().unwrap_or_default();
        let listen: SocketAddrV4 = listen.parse().map_err(|_| bad(format!("service address {listen:?}")))?;
        if !listen.ip().is_loopback() {
            return Err(bad(format!("service address {listen}: not in 127.0.0.0/8")));
        }
        let mut backends = Vec::new();
        let mut own = Vec::new();
        for b in words {
            if let Some(node) = b.strip_prefix('!') {
                own.push(node.parse().map_err(|_| bad(format!("service node {b:?}")))?);
                continue;
            }
            let parts: Vec<&str> = b.split(':').collect();
            let [node, port, when] = parts[..] else { return Err(bad(format!("service backend {b:?}"))) };
            let when = match when {
                "started" => When::Started,
                "healthy" => When::Healthy,
                _ => return Err(bad(format!("service backend {b:?}: {when:?}"))),
            };
            let node = node.parse().map_err(|_| bad(format!("service backend {b:?}")))?;
            let port = port.parse().map_err(|_| bad(format!("service backend {b:?}")))?;
            backends.push(Backend { node, port, when });
        }
        routes.push(Route { listen, backends, own });
    }
    Ok(routes)
}

/// Starts node `node`'s proxy if the machine has Services: a child of the
/// supervisor in the node's namespaces, which dies with the node.
pub(super) fn start(node: u16) {
    let text = match std::fs::read_to_string(hvsim_abi::linux::SERVICES) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => return eprintln!("hvsim-init: node {node}: cannot read the services: {e}"),
    };
    let routes = match parse(&text) {
        Ok(r) => r.into_iter().filter(|r| !r.own.contains(&node)).collect::<Vec<_>>(),
        Err(e) => return eprintln!("hvsim-init: node {node}: services: {e}"),
    };
    if routes.is_empty() {
        return;
    }
    // SAFETY: the supervisor is single-threaded: the child may run any code.
    match unsafe { libc::fork() } {
        0 => {
            let e = Proxy::new(node, routes).and_then(|mut p| p.run());
            if let Err(e) = e {
                eprintln!("hvsim-init: node {node}: service proxy: {e}");
            }
            // SAFETY: the child ends here, without the parent's destructors.
            unsafe { libc::_exit(1) }
        }
        pid if pid < 0 => eprintln!("hvsim-init: node {node}: cannot start its service proxy"),
        _ => {}
    }
}

/// Bytes in flight one way, at most [`Pipe::CAP`].
#[derive(Default)]
struct Pipe {
    buf: Vec<u8>,
    /// The reading side said end of stream.
    eof: bool,
    /// ...and it went on to the writing side (shutdown).
    done: bool,
}

impl Pipe {
    const CAP: usize = 64 << 10;

    fn wants_read(&self) -> bool {
        !self.eof && self.buf.len() < Pipe::CAP
    }

    /// Reads what `from` has; false if the connection failed.
    fn fill(&mut self, from: &mut TcpStream) -> bool {
        let mut chunk = [0u8; 16 << 10];
        let room = (Pipe::CAP - self.buf.len()).min(chunk.len());
        match from.read(&mut chunk[..room]) {
            Ok(0) => self.eof = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
        true
    }

    /// Writes what it holds to `to`, and passes the end on; false if the
    /// connection failed.
    fn drain(&mut self, to: &mut TcpStream) -> bool {
        if !self.buf.is_empty() {
            match to.write(&self.buf) {
                Ok(n) => {
                    self.buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.eof && self.buf.is_empty() && !self.done {
            self.done = true;
            let _ = to.shutdown(Shutdown::Write);
        }
        true
    }
}

/// A relayed connection.
struct Pair {
    client: TcpStream,
    backend: TcpStream,
    /// The connection to the backend is still being made.
    connecting: bool,
    up: Pipe,
    down: Pipe,
}

struct Proxy {
    node: u16,
    routes: Vec<Route>,
    listeners: Vec<TcpListener>,
    /// Per route: connections given out so far, plus the node's number.
    turns: Vec<usize>,
    /// Per route: whether "no pod is ready" was said since one was.
    said_none: Vec<bool>,
    pairs: Vec<Pair>,
}

impl Proxy {
    fn new(node: u16, all: Vec<Route>) -> io::Result<Proxy> {
        let (mut routes, mut listeners) = (Vec::new(), Vec::new());
        for r in all {
            // The port may be taken (a server of the node's listening on
            // all addresses, on a port its pod does not declare): then the
            // Service's address reaches that server, and no pod behind it.
            match TcpListener::bind(r.listen) {
                Ok(l) => {
                    l.set_nonblocking(true)?;
                    listeners.push(l);
                    routes.push(r);
                }
                Err(e) => println!("hvsim-init: node {node}: service {} is not proxied here: {e}", r.listen),
            }
        }
        let n = routes.len();
        Ok(Proxy {
            node,
            routes,
            listeners,
            turns: vec![usize::from(node); n],
            said_none: vec![false; n],
            pairs: Vec::new(),
        })
    }

    fn run(&mut self) -> io::Result<()> {
        loop {
            let mut fds: Vec<libc::pollfd> = self
                .listeners
                .iter()
                .map(|l| libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 })
                .collect();
            for p in &self.pairs {
                let (client, backend) = p.events();
                let fd = |s: &TcpStream, events| if events == 0 { -1 } else { s.as_raw_fd() };
                fds.push(libc::pollfd { fd: fd(&p.client, client), events: client, revents: 0 });
                fds.push(libc::pollfd { fd: fd(&p.backend, backend), events: backend, revents: 0 });
            }
            // SAFETY: fds is a valid array.
            if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = self.listeners.len();
            let mut keep = Vec::with_capacity(self.pairs.len());
            for (i, mut p) in std::mem::take(&mut self.pairs).into_iter().enumerate() {
                let woke = fds[n + 2 * i].revents | fds[n + 2 * i + 1].revents;
                if woke == 0 || p.relay() {
                    keep.push(p);
                }
            }
            self.pairs = keep;
            for (r, fd) in fds[..n].iter().enumerate() {
                if fd.revents != 0 {
                    self.accept(r);
                }
            }
        }
    }

    /// Takes the connections waiting on route `r`, each to a ready pod.
    fn accept(&mut self, r: usize) {
        while let Ok((client, _)) = self.listeners[r].accept() {
            let route = &self.routes[r];
            let ready: Vec<bool> = route.backends.iter().map(Backend::ready).collect();
            let Some(k) = pick(self.turns[r], &ready) else {
                if !self.said_none[r] {
                    self.said_none[r] = true;
                    println!(
                        "hvsim-init: node {}: service {} has no ready pod; its connections are reset",
                        self.node, route.listen
                    );
                }
                reset(&client);
                continue;
            };
            self.said_none[r] = false;
            self.turns[r] += 1;
            let b = &route.backends[k];
            let to = SocketAddrV4::new(std::net::Ipv4Addr::from(crate::nodes::address(b.node)), b.port);
            match connect(to).and_then(|backend| client.set_nonblocking(true).map(|()| backend)) {
                Ok(backend) => self.pairs.push(Pair::new(client, backend)),
                Err(_) => reset(&client),
            }
        }
    }
}

/// Which backend turn `turn` goes to: the next ready one in round robin.
fn pick(turn: usize, ready: &[bool]) -> Option<usize> {
    let up: Vec<usize> = (0..ready.len()).filter(|&k| ready[k]).collect();
    (!up.is_empty()).then(|| up[turn % up.len()])
}

impl Pair {
    fn new(client: TcpStream, backend: TcpStream) -> Pair {
        Pair { client, backend, connecting: true, up: Pipe::default(), down: Pipe::default() }
    }

    /// What to poll for on the client and the backend (0: nothing, and
    /// the descriptor is left out, so a hung-up side does not wake the
    /// loop until there is something to do with it).
    fn events(&self) -> (libc::c_short, libc::c_short) {
        if self.connecting {
            return (0, libc::POLLOUT);
        }
        let (mut client, mut backend) = (0, 0);
        if self.up.wants_read() {
            client |= libc::POLLIN;
        }
        if self.down.wants_read() {
            backend |= libc::POLLIN;
        }
        if !self.up.buf.is_empty() {
            backend |= libc::POLLOUT;
        }
        if !self.down.buf.is_empty() {
            client |= libc::POLLOUT;
        }
        (client, backend)
    }

    /// Moves what it can without blocking; false when the pair is over
    /// (both ways ended, or either side failed: then the client is reset).
    fn relay(&mut self) -> bool {
        if self.connecting {
            match self.backend.take_error() {
                Ok(None) => self.connecting = false,
                // The pod refused or cannot be reached: so is the client.
                _ => {
                    reset(&self.client);
                    return false;
                }
            }
        }
        let ok = (!self.up.wants_read() || self.up.fill(&mut self.client))
            && (!self.down.wants_read() || self.down.fill(&mut self.backend))
            && self.up.drain(&mut self.backend)
            && self.down.drain(&mut self.client);
        if !ok {
            reset(&self.client);
            return false;
        }
        !(self.up.done && self.down.done)
    }
}

/// Makes closing `s` reset the connection, as a refused one would end.
fn reset(s: &TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setting an option of a socket we own, from a local.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Starts a connection to `to` without waiting for it.
fn connect(to: SocketAddrV4) -> io::Result<TcpStream> {
    // SAFETY: a new socket, owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned here only.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*to.ip()).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: connecting our socket to an address in a local.
    let r = unsafe {
        libc::connect(fd, (&addr as *const libc::sockaddr_in).cast(), std::mem::size_of_val(&addr) as libc::socklen_t)
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_strictly() {
        let text = "127.96.0.1:6379 1:6379:healthy 2:6380:started\n\n127.96.0.2:80\n";
        let routes = parse(text).unwrap();
        assert_eq!(routes[0].listen, "127.96.0.1:6379".parse().unwrap());
        assert_eq!(parse("127.96.0.1:80 !0 !2 1:80:started").unwrap()[0].own, [0, 2]);
        assert_eq!(
            routes[0].backends,
            [
                Backend { node: 1, port: 6379, when: When::Healthy },
                Backend { node: 2, port: 6380, when: When::Started }
            ]
        );
        assert!(routes[1].backends.is_empty(), "a Service that selects no ready pod yet");
        for (bad, why) in [
            ("10.0.0.1:80 1:80:started", "not in 127.0.0.0/8"),
            ("127.96.0.1 1:80:started", "service address"),
            ("127.96.0.1:80 1:80", "service backend"),
            ("127.96.0.1:80 1:80:soon", "\"soon\""),
            ("127.96.0.1:80 x:80:started", "service backend"),
            ("127.96.0.1:80 !x", "service node"),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn turns_go_round_the_ready_backends() {
        let all = [true, true, true];
        assert_eq!((0..4).map(|t| pick(t, &all).unwrap()).collect::<Vec<_>>(), [0, 1, 2, 0]);
        let some = [false, true, true];
        assert_eq!((0..3).map(|t| pick(t, &some).unwrap()).collect::<Vec<_>>(), [1, 2, 1]);
        assert_eq!(pick(5, &[false, false]), None);
        assert_eq!(pick(0, &[]), None);
    }

    /// A relayed connection carries bytes both ways and passes on each
    /// side's end; a backend that refuses resets the client.
    #[test]
    fn a_pair_relays_both_ways_and_resets_on_refusal() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let v4 = |l: &TcpListener| match l.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!("bound to IPv4"),
        };
        let mut client = TcpStream::connect(front.local_addr().unwrap()).unwrap();
        let (accepted, _) = front.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        let mut pair = Pair::new(accepted, connect(v4(&server)).unwrap());
        let (mut backend, _) = server.accept().unwrap();
        // As the proxy's loop does: relay once the connection is made.
        let mut fd = libc::pollfd { fd: pair.backend.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut fd, 1, 5000) }, 1);
        client.write_all(b"ping").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut request = Vec::new();
        backend.set_read_timeout(Some(std::time::Duration::from_millis(10))).unwrap();
        while !request.ends_with(b"ping") || !pair.up.done {
            assert!(pair.relay(), "the pair ended early");
            let mut buf = [0u8; 16];
            if let Ok(n) = backend.read(&mut buf) {
                request.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(request, b"ping");
        backend.write_all(b"pong").unwrap();
        backend.shutdown(Shutdown::Write).unwrap();
        while pair.relay() {}
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "pong");

        // A port nobody listens on: the client's connection is reset.
        let closed = v4(&TcpListener::bind("127.0.0.1:0").unwrap());
        let mut client = TcpStream::connect(front.local_addr().unwrap()).unwrap();
        let (accepted, _) = front.accept().unwrap();
        let mut pair = Pair::new(accepted, connect(closed).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!pair.relay(), "a refused backend ends the pair");
        drop(pair);
        let mut buf = [0u8; 1];
        let e = client.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    }
}
