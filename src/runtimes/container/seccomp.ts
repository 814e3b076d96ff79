/**
 * A deny-list seccomp profile on top of the dropped capabilities: kernel-facing calls that a
 * desktop never needs fail with EPERM even if a capability were regained. It allows the
 * rest, as the guest runs arbitrary desktop programs.
 */
const DENIED_SYSCALLS = [
  'acct', 'add_key', 'bpf', 'clock_adjtime', 'clock_settime', 'delete_module', 'finit_module',
  'fsconfig', 'fsmount', 'fsopen', 'fspick', 'init_module', 'ioperm', 'iopl', 'kexec_file_load',
  'kexec_load', 'keyctl', 'lookup_dcookie', 'mount', 'mount_setattr', 'move_mount',
  'name_to_handle_at', 'nfsservctl', 'open_by_handle_at', 'open_tree', 'perf_event_open',
  'pivot_root', 'quotactl', 'quotactl_fd', 'reboot', 'request_key', 'setns', 'settimeofday',
  'adjtimex', 'swapoff', 'swapon', 'syslog', 'umount2', 'unshare', 'userfaultfd',
];

const CLONE_NEWUSER = 0x10000000;
const EPERM = 1;
const ENOSYS = 38;

export interface SeccompProfile {
  defaultAction: string;
  architectures: string[];
  syscalls: Array<{
    names: string[];
    action: string;
    errnoRet?: number;
    args?: Array<{ index: number; value: number; valueTwo: number; op: string }>;
  }>;
}

export function seccompProfile(): SeccompProfile {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: DENIED_SYSCALLS, action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      // No new user namespaces (they would hand the guest a full capability set inside).
      {
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: 'SCMP_CMP_MASKED_EQ' }],
      },
      // clone3 passes its flags in memory, which seccomp cannot inspect: ENOSYS makes libc
      // fall back to clone, where the rule above applies.
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
    ],
  };
}
