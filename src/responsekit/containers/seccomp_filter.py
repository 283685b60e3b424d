"""Writes the sandbox's seccomp filter as BPF to the file named by the first argument.

Run by Debian's /usr/bin/python3 with `python3-seccomp` (libseccomp's binding), never imported
by the gateway (whose venv cannot import it: the binding is imported in `build`, so importing this
module needs nothing); `bubblewrap.py` runs it once and caches the file, which
bubblewrap loads with `--seccomp FD`. Everything is allowed but the calls a sandboxed program has no
use for and that widen the kernel's surface, the same choices as Docker's default profile
(https://docs.docker.com/engine/security/seccomp/): each returns EPERM, so a program sees a failed
call, not a crash. A foreign architecture's calls (x32, i386 through `int 0x80`) kill the process:
libseccomp's default for an architecture the filter was not built for.
"""

import errno
import sys

DENIED = (
    # Debugging another process, reading its memory.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    # Filesystems: mounting, pivoting, the new mount API.
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr",
    # Another kernel, modules, the machine itself.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "vhangup",
    # Kernel facilities with a record of exploits.
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "io_uring_setup",
    "io_uring_enter", "io_uring_register",
    # Clocks and the machine's names.
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname",
    # Entering or making namespaces (the clone flags are checked below).
    "setns", "unshare",
    # Execution domains (personality(2) can turn address randomization off).
    "personality",
    "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "iopl", "ioperm",
)  # fmt: skip

# clone(2)'s namespace flags (linux/sched.h): a new user namespace is where most container escapes
# start. clone3 passes its flags in memory a filter cannot read, so it fails with ENOSYS and libc
# falls back to clone, whose flags are checked (what Docker's profile does too).
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


def build(path: str) -> None:
    import seccomp  # Debian's python3-seccomp, on /usr/bin/python3 only

    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError):
            pass  # not a call on this architecture
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(
            seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag)
        )
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with open(path, "wb") as out:
        rules.export_bpf(out)


if __name__ == "__main__":
    build(sys.argv[1])
