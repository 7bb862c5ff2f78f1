//! The container's root: the image under an overlay whose writable layer
//! is on the node's disk, the kernel's file systems, /dev, the SDK
//! channel, the files at fixed places and the volumes; then pivot_root.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use super::spec::{MountKind, Spec};
use super::{bad, ctx, state_dir};
use crate::nodes;

/// The Antithesis SDKs' coverage library, where they look for it.
const VOIDSTAR: &str = "/usr/lib/libvoidstar.so";

/// Mounts the container's root and moves into it.
pub(super) fn build_root(node: u16, spec: &Spec) -> io::Result<()> {
    let dir = state_dir(node);
    let p = |s: &str| dir.join(s).display().to_string();
    // Nothing mounted here may reach the node's other processes.
    mount_raw(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None).map_err(ctx("making mounts private"))?;
    // pivot_root cannot move the initramfs (it has no parent mount): work
    // from a bind mount of it instead.
    let host = p("host");
    std::fs::create_dir_all(&host)?;
    mount_raw(Some("/"), &host, None, libc::MS_BIND | libc::MS_REC, None).map_err(ctx("binding /"))?;
    chroot(&host)?;
    let (lower, disk, root) = (p("lower"), p("disk"), p("root"));
    for d in [&lower, &disk, &root] {
        std::fs::create_dir_all(d)?;
    }
    // Containers of one image mount its one disk: the kernel gives them one
    // superblock, so they share its page cache too.
    mount_raw(Some(&nodes::image_link(spec.image_disk)), &lower, Some("ext4"), libc::MS_RDONLY, None)
        .map_err(ctx("mounting the image"))?;
    mount_raw(Some(&nodes::disk_link(node)), &disk, Some("ext4"), 0, Some("noinit_itable"))
        .map_err(ctx("mounting the node's disk"))?;
    // An init container's writes are its own (its image may differ);
    // volumes are the pod's, shared.
    let layer = if spec.layer.is_empty() { disk.clone() } else { format!("{disk}/{}", spec.layer) };
    for d in [format!("{layer}/upper"), format!("{layer}/work"), format!("{disk}/volumes")] {
        std::fs::create_dir_all(d)?;
    }
    let opts = format!("lowerdir={lower},upperdir={layer}/upper,workdir={layer}/work");
    mount_raw(Some("overlay"), &root, Some("overlay"), 0, Some(&opts)).map_err(ctx("mounting the overlay"))?;
    // Files the container sees at fixed places, and the volumes: opened
    // now, bound after pivot_root so their targets resolve inside the
    // container (a symbolic link in the image cannot send them out of it).
    let etc = p("etc");
    std::fs::create_dir_all(&etc)?;
    std::fs::write(format!("{etc}/hosts"), &spec.hosts)?;
    std::fs::write(format!("{etc}/hostname"), format!("{}\n", spec.hostname))?;
    std::fs::write(format!("{etc}/resolv.conf"), "# hvsim: services resolve through /etc/hosts\n")?;
    let mut binds: Vec<(File, String, bool, bool)> = Vec::new();
    for f in ["hosts", "hostname", "resolv.conf"] {
        binds.push((open_path(&format!("{etc}/{f}"))?, format!("/etc/{f}"), false, false));
    }
    for m in &spec.mounts {
        let source = match m.kind {
            MountKind::Volume => {
                // A directory of the volume (a subPath) may be a file an
                // init container made; what is missing is made a directory.
                let v = format!("{disk}/volumes/{}", m.source);
                if std::fs::symlink_metadata(&v).is_err() {
                    std::fs::create_dir_all(&v)?;
                }
                v
            }
            MountKind::File => m.source.clone(),
        };
        let is_dir = std::fs::metadata(&source).map_err(ctx(&format!("volume source {source}")))?.is_dir();
        binds.push((open_path(&source)?, m.target.clone(), m.read_only, is_dir));
    }
    // The kernel's file systems.
    let mk = |rel: &str| -> io::Result<String> {
        let t = format!("{root}{rel}");
        std::fs::create_dir_all(&t)?;
        Ok(t)
    };
    mount_raw(Some("proc"), &mk("/proc")?, Some("proc"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(ctx("mounting /proc"))?;
    mount_raw(
        Some("sysfs"),
        &mk("/sys")?,
        Some("sysfs"),
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(ctx("mounting /sys"))?;
    let dev = mk("/dev")?;
    mount_raw(Some("tmpfs"), &dev, Some("tmpfs"), libc::MS_NOSUID, Some("mode=755,size=65536k"))
        .map_err(ctx("mounting /dev"))?;
    for (name, major, minor) in
        [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)]
    {
        let path = CString::new(format!("{dev}/{name}")).expect("no NUL");
        // SAFETY: mknod with a valid path.
        if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(major, minor)) } != 0 {
            return Err(ctx(&format!("creating /dev/{name}"))(io::Error::last_os_error()));
        }
        // The umask took bits of the mode.
        // SAFETY: chmod with a valid path.
        unsafe { libc::chmod(path.as_ptr(), 0o666) };
    }
    mount_raw(
        Some("devpts"),
        &mk("/dev/pts")?,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
    )
    .map_err(ctx("mounting /dev/pts"))?;
    mount_raw(
        Some("shm"),
        &mk("/dev/shm")?,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("mode=1777,size=65536k"),
    )
    .map_err(ctx("mounting /dev/shm"))?;
    mount_raw(
        Some("mqueue"),
        &mk("/dev/mqueue")?,
        Some("mqueue"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(ctx("mounting /dev/mqueue"))?;
    // hvsim's device (SDK coverage maps), as the guest's init has it.
    if let Ok(m) = std::fs::metadata("/dev/hvsim") {
        use std::os::unix::fs::MetadataExt;
        let path = CString::new(format!("{dev}/hvsim")).expect("no NUL");
        // SAFETY: mknod with a valid path.
        if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, m.rdev()) } != 0 {
            return Err(ctx("creating /dev/hvsim")(io::Error::last_os_error()));
        }
        // SAFETY: chmod with a valid path.
        unsafe { libc::chmod(path.as_ptr(), 0o666) };
    }
    // The SDK channel, where the guest's own commands have it.
    let run_hvsim = mk("/run/hvsim")?;
    mount_raw(Some("tmpfs"), &run_hvsim, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some("mode=755,size=64k"))
        .map_err(ctx("mounting /run/hvsim"))?;
    mount_raw(Some("hvsim"), &mk("/run/hvsim/channel")?, Some("hvsim"), 0, None)
        .map_err(ctx("mounting the SDK channel"))?;
    std::os::unix::fs::symlink("channel/sdk", format!("{run_hvsim}/sdk"))?;
    if Path::new(VOIDSTAR).exists() {
        binds.push((open_path(VOIDSTAR)?, VOIDSTAR.to_owned(), true, false));
    }
    // `$ANTITHESIS_STOP_FAULTS`: this init, static, runs in any image.
    binds.push((open_path("/init")?, crate::sdk::STOP_FAULTS.to_owned(), true, false));
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}"))?;
    }
    // Into the root. The old root goes under the new /dev (a tmpfs, so
    // nothing of this reaches the image or the disk) until the binds are
    // made: their sources must still be in this mount namespace.
    let old = format!("{dev}/.hvsim-old-root");
    std::fs::create_dir(&old)?;
    pivot_root(&root, &old).map_err(ctx("pivot_root"))?;
    std::env::set_current_dir("/")?;
    let tmp = Path::new("/tmp");
    if !tmp.exists() {
        std::fs::create_dir_all(tmp)?;
        std::fs::set_permissions(tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    }
    for (fd, target, read_only, is_dir) in binds {
        let t = Path::new(&target);
        if is_dir {
            std::fs::create_dir_all(t).map_err(ctx(&format!("volume target {target}")))?;
        } else if !t.exists() {
            if let Some(parent) = t.parent() {
                std::fs::create_dir_all(parent)?;
            }
            File::create(t).map_err(ctx(&format!("mount target {target}")))?;
        }
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount_raw(Some(&source), &target, None, libc::MS_BIND, None).map_err(ctx(&format!("binding {target}")))?;
        if read_only {
            mount_raw(None, &target, None, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY, None)
                .map_err(ctx(&format!("making {target} read-only")))?;
        }
    }
    crate::sys::umount("/dev/.hvsim-old-root", true).map_err(ctx("detaching the old root"))?;
    std::fs::remove_dir("/dev/.hvsim-old-root")?;
    Ok(())
}

pub(super) fn open_path(path: &str) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options().read(true).custom_flags(libc::O_PATH).open(path).map_err(ctx(path))
}

pub(super) fn mount_raw(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let c =
        |s: Option<&str>| s.map(|s| CString::new(s).map_err(|_| bad("a NUL in a mount argument".into()))).transpose();
    let (src, tgt, fs, dat) = (c(source)?, c(Some(target))?.expect("some"), c(fstype)?, c(data)?);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: NUL-terminated strings (or null) that outlive the call.
    let r = unsafe { libc::mount(ptr(&src), tgt.as_ptr(), ptr(&fs), flags, ptr(&dat).cast()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn chroot(path: &str) -> io::Result<()> {
    let p = CString::new(path).map_err(|_| bad("a NUL in a path".into()))?;
    // SAFETY: chroot with a valid path.
    if unsafe { libc::chroot(p.as_ptr()) } != 0 {
        return Err(ctx("chroot")(io::Error::last_os_error()));
    }
    std::env::set_current_dir("/")
}

pub(super) fn pivot_root(new: &str, old: &str) -> io::Result<()> {
    let (n, o) = (CString::new(new).expect("no NUL"), CString::new(old).expect("no NUL"));
    // SAFETY: pivot_root with valid paths.
    if unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn set_hostname(name: &str) -> io::Result<()> {
    if name.is_empty() {
        return Ok(());
    }
    // SAFETY: a buffer and its length.
    if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } != 0 {
        return Err(ctx("sethostname")(io::Error::last_os_error()));
    }
    Ok(())
}
