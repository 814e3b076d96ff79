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
import { DOCKER_ALLOWED_SYSCALLS } from './seccomp-syscalls.js';

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

/** The calls that set a process's effective uid, by the index of that argument (setuid's is its only one). */
const EFFECTIVE_UID_ARG: ReadonlyArray<[string[], number]> = [
  [['setuid', 'setuid32'], 0],
  [['setreuid', 'setreuid32', 'setresuid', 'setresuid32'], 1],
];
/** (uid_t)-1: "unchanged", for setreuid and setresuid. */
const UNCHANGED = 0xffffffff;
const SETS_EFFECTIVE_UID = new Set(EFFECTIVE_UID_ARG.flatMap(([names]) => names));

/**
 * `guestUids`: the only uids a process may make its effective one (guest-uids.ts): the kernel
 * counts inotify per uid, so a uid is a budget. With no_new_privs a set-uid file changes no
 * uid, so these calls are the only way to another. Without it (a template's build step, whose
 * packages may add users and run as them) any uid of the range.
 */
export function seccompProfile(guestUids?: readonly number[]): SeccompProfile {
  const setUid = guestUids
    ? EFFECTIVE_UID_ARG.flatMap(([names, index]) =>
        [...guestUids, ...(index > 0 ? [UNCHANGED] : [])].map((value) => ({
          names,
          action: 'SCMP_ACT_ALLOW',
          args: [{ index, value, op: 'SCMP_CMP_EQ' }],
        })),
      )
    : [{ names: [...SETS_EFFECTIVE_UID], action: 'SCMP_ACT_ALLOW' }];
  return {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: EPERM,
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: DOCKER_ALLOWED_SYSCALLS.filter((name) => !SETS_EFFECTIVE_UID.has(name)), action: 'SCMP_ACT_ALLOW' },
      ...setUid,
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
