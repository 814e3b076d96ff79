/**
 * The sandbox's seccomp profile: an allow-list with the semantics of Docker's default
 * profile (moby/moby profiles/seccomp/default.json), resolved for x86 and for the capability
 * set the guest has (oci-spec.ts GUEST_CAPABILITIES), plus io_uring denied.
 *
 * Every system call not listed fails with EPERM (runc answers ENOSYS instead for calls newer
 * than its libseccomp knows, so programs fall back as they would on an older kernel).
 * Docker's rules that apply only with a capability we never grant (CAP_SYS_ADMIN: mount,
 * unshare, setns, bpf, ...; CAP_SYS_PTRACE: kcmp, pidfd_getfd, process_madvise;
 * CAP_SYS_MODULE, CAP_SYS_TIME, CAP_SYS_BOOT, CAP_SYS_PACCT, CAP_SYS_RAWIO, CAP_SYS_NICE,
 * CAP_SYSLOG, CAP_SYS_TTY_CONFIG, CAP_DAC_READ_SEARCH, CAP_BPF, CAP_PERFMON) are left out,
 * so those calls are denied; the rules Docker applies when CAP_SYS_ADMIN is absent (clone
 * without namespace flags, clone3 as ENOSYS) are kept.
 */

/** Docker's unconditional allow-list, less the io_uring calls (denied below). */
const ALLOWED = [
  'accept', 'accept4', 'access', 'adjtimex', 'alarm', 'bind', 'brk', 'capget', 'capset', 'chdir', 'chmod',
  'chown', 'chown32', 'clock_adjtime', 'clock_adjtime64', 'clock_getres', 'clock_getres_time64',
  'clock_gettime', 'clock_gettime64', 'clock_nanosleep', 'clock_nanosleep_time64', 'close', 'close_range',
  'connect', 'copy_file_range', 'creat', 'dup', 'dup2', 'dup3', 'epoll_create', 'epoll_create1', 'epoll_ctl',
  'epoll_ctl_old', 'epoll_pwait', 'epoll_pwait2', 'epoll_wait', 'epoll_wait_old', 'eventfd', 'eventfd2',
  'execve', 'execveat', 'exit', 'exit_group', 'faccessat', 'faccessat2', 'fadvise64', 'fadvise64_64',
  'fallocate', 'fanotify_mark', 'fchdir', 'fchmod', 'fchmodat', 'fchown', 'fchown32', 'fchownat', 'fcntl',
  'fcntl64', 'fdatasync', 'fgetxattr', 'flistxattr', 'flock', 'fork', 'fremovexattr', 'fsetxattr', 'fstat',
  'fstat64', 'fstatat64', 'fstatfs', 'fstatfs64', 'fsync', 'ftruncate', 'ftruncate64', 'futex',
  'futex_time64', 'futex_waitv', 'futimesat', 'getcpu', 'getcwd', 'getdents', 'getdents64', 'getegid',
  'getegid32', 'geteuid', 'geteuid32', 'getgid', 'getgid32', 'getgroups', 'getgroups32', 'getitimer',
  'getpeername', 'getpgid', 'getpgrp', 'getpid', 'getppid', 'getpriority', 'getrandom', 'getresgid',
  'getresgid32', 'getresuid', 'getresuid32', 'getrlimit', 'get_robust_list', 'getrusage', 'getsid',
  'getsockname', 'getsockopt', 'get_thread_area', 'gettid', 'gettimeofday', 'getuid', 'getuid32',
  'getxattr', 'inotify_add_watch', 'inotify_init', 'inotify_init1', 'inotify_rm_watch', 'io_cancel',
  'ioctl', 'io_destroy', 'io_getevents', 'io_pgetevents', 'io_pgetevents_time64', 'ioprio_get',
  'ioprio_set', 'io_setup', 'io_submit', 'ipc', 'kill', 'landlock_add_rule', 'landlock_create_ruleset',
  'landlock_restrict_self', 'lchown', 'lchown32', 'lgetxattr', 'link', 'linkat', 'listen', 'listxattr',
  'llistxattr', '_llseek', 'lremovexattr', 'lseek', 'lsetxattr', 'lstat', 'lstat64', 'madvise',
  'membarrier', 'memfd_create', 'memfd_secret', 'mincore', 'mkdir', 'mkdirat', 'mknod', 'mknodat', 'mlock',
  'mlock2', 'mlockall', 'mmap', 'mmap2', 'mprotect', 'mq_getsetattr', 'mq_notify', 'mq_open',
  'mq_timedreceive', 'mq_timedreceive_time64', 'mq_timedsend', 'mq_timedsend_time64', 'mq_unlink',
  'mremap', 'msgctl', 'msgget', 'msgrcv', 'msgsnd', 'msync', 'munlock', 'munlockall', 'munmap',
  'name_to_handle_at', 'nanosleep', 'newfstatat', '_newselect', 'open', 'openat', 'openat2', 'pause',
  'pidfd_open', 'pidfd_send_signal', 'pipe', 'pipe2', 'pkey_alloc', 'pkey_free', 'pkey_mprotect', 'poll',
  'ppoll', 'ppoll_time64', 'prctl', 'pread64', 'preadv', 'preadv2', 'prlimit64', 'process_mrelease',
  'pselect6', 'pselect6_time64', 'pwrite64', 'pwritev', 'pwritev2', 'read', 'readahead', 'readlink',
  'readlinkat', 'readv', 'recv', 'recvfrom', 'recvmmsg', 'recvmmsg_time64', 'recvmsg', 'remap_file_pages',
  'removexattr', 'rename', 'renameat', 'renameat2', 'restart_syscall', 'rmdir', 'rseq', 'rt_sigaction',
  'rt_sigpending', 'rt_sigprocmask', 'rt_sigqueueinfo', 'rt_sigreturn', 'rt_sigsuspend', 'rt_sigtimedwait',
  'rt_sigtimedwait_time64', 'rt_tgsigqueueinfo', 'sched_getaffinity', 'sched_getattr', 'sched_getparam',
  'sched_get_priority_max', 'sched_get_priority_min', 'sched_getscheduler', 'sched_rr_get_interval',
  'sched_rr_get_interval_time64', 'sched_setaffinity', 'sched_setattr', 'sched_setparam',
  'sched_setscheduler', 'sched_yield', 'seccomp', 'select', 'semctl', 'semget', 'semop', 'semtimedop',
  'semtimedop_time64', 'send', 'sendfile', 'sendfile64', 'sendmmsg', 'sendmsg', 'sendto', 'setfsgid',
  'setfsgid32', 'setfsuid', 'setfsuid32', 'setgid', 'setgid32', 'setgroups', 'setgroups32', 'setitimer',
  'setpgid', 'setpriority', 'setregid', 'setregid32', 'setresgid', 'setresgid32', 'setresuid',
  'setresuid32', 'setreuid', 'setreuid32', 'setrlimit', 'set_robust_list', 'setsid', 'setsockopt',
  'set_thread_area', 'set_tid_address', 'setuid', 'setuid32', 'setxattr', 'shmat', 'shmctl', 'shmdt',
  'shmget', 'shutdown', 'sigaltstack', 'signalfd', 'signalfd4', 'sigprocmask', 'sigreturn', 'socketcall',
  'socketpair', 'splice', 'stat', 'stat64', 'statfs', 'statfs64', 'statx', 'symlink', 'symlinkat', 'sync',
  'sync_file_range', 'syncfs', 'sysinfo', 'tee', 'tgkill', 'time', 'timer_create', 'timer_delete',
  'timer_getoverrun', 'timer_gettime', 'timer_gettime64', 'timer_settime', 'timer_settime64',
  'timerfd_create', 'timerfd_gettime', 'timerfd_gettime64', 'timerfd_settime', 'timerfd_settime64',
  'times', 'tkill', 'truncate', 'truncate64', 'ugetrlimit', 'umask', 'uname', 'unlink', 'unlinkat', 'utime',
  'utimensat', 'utimensat_time64', 'utimes', 'vfork', 'vmsplice', 'wait4', 'waitid', 'waitpid', 'write',
  'writev',
  // Docker: on kernels >= 4.8, where ptrace can no longer bypass seccomp. The pid namespace
  // bounds what can be traced to the sandbox's own processes.
  'ptrace', 'process_vm_readv', 'process_vm_writev',
  // Docker: x86 only.
  'arch_prctl', 'modify_ldt',
  // Docker: with CAP_SYS_CHROOT, which sshd's privilege separation needs.
  'chroot',
];

/**
 * io_uring: a large kernel attack surface that Docker's current default still allows, and
 * that seccomp cannot see through (its operations are not system calls). ENOSYS: programs
 * that try it take their ordinary path, as on a kernel without it.
 */
export const DENIED_IO_URING = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'];

/** Docker's personality() values: the default, PER_LINUX32, UNAME26, both, and the query. */
const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];
/** AF_VSOCK: a socket to the hypervisor, refused as Docker does. */
const AF_VSOCK = 40;
/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: no new namespaces. */
const CLONE_NAMESPACE_FLAGS = 0x7e020000;

const EPERM = 1;
const ENOSYS = 38;

interface SeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: string;
}

export interface SeccompProfile {
  defaultAction: string;
  defaultErrnoRet: number;
  architectures: string[];
  syscalls: Array<{ names: string[]; action: string; errnoRet?: number; args?: SeccompArg[] }>;
}

export function seccompProfile(): SeccompProfile {
  return {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: EPERM,
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: ALLOWED, action: 'SCMP_ACT_ALLOW' },
      { names: ['socket'], action: 'SCMP_ACT_ALLOW', args: [{ index: 0, value: AF_VSOCK, op: 'SCMP_CMP_NE' }] },
      // Rules on one call are OR'ed when each is its own entry (one entry's args are AND'ed).
      ...PERSONALITIES.map((value) => ({
        names: ['personality'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value, op: 'SCMP_CMP_EQ' }],
      })),
      // A thread or process, never a namespace (they would give the guest new powers inside).
      {
        names: ['clone'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: CLONE_NAMESPACE_FLAGS, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }],
      },
      // clone3 passes its flags in memory, which seccomp cannot inspect: ENOSYS makes libc
      // fall back to clone, where the rule above applies.
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      { names: DENIED_IO_URING, action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    ],
  };
}
