/**
 * The guest side of the spawner (spawner.ts): one long-lived `python3 -I -S -c` per session,
 * as the guest user, on one exec channel of the session's SSH connection; nothing listens.
 * It forks the session's (non-terminal) processes on request, so a start costs one message
 * and a fork/exec instead of sshd's session, the login shell and our wrapper shell.
 *
 * Frames both ways: a type byte, the process's id (u32, the host's), the payload's length
 * (u32), the payload. Host to guest: S start (JSON {argv, cwd, env: [[name, value]]}: data,
 * never a shell's text), I stdin bytes, E stdin's end, G grant (u32: that many more bytes of
 * output may be sent, as an SSH window adjust), K signal (a name: TERM, KILL, ...) to every process of
 * the process's session, as `pkill -s` does, C close (forget it). Guest to host: h hello
 * (once), p pid (decimal), n cwd not enterable, o/e stdout/stderr bytes (at most 32 KiB, and
 * never more than granted: the process's pipes are not read while its grant is spent), a one
 * stdin frame taken (at once while at most 1 MiB waits for the process, as sshd's window
 * would take it, else once written), k one signal frame done, x exit ("c N" or "s NAME"), z closed (exited and both
 * pipes at their end). Every process runs in a session of its own (setsid: its pid is its
 * session's id, which signals name, as with sshd).
 */
export const SPAWNER_SOURCE = String.raw`
import errno, json, os, selectors, signal, struct, sys
try:
    # Named so that a user's "pkill python3" in the sandbox leaves the session's processes be.
    import ctypes
    ctypes.CDLL(None).prctl(15, b"sbx-spawner", 0, 0, 0)
except Exception:
    pass
HEAD = struct.Struct(">cII")
CHUNK = 32768
WINDOW = 1048576
inp = sys.stdin.buffer.raw
out = sys.stdout.buffer.raw
os.set_blocking(inp.fileno(), False)
# Frames wait here for the end of the loop's turn, then leave in one write: a process's exit
# and its close are one SSH packet, not two (as the host does, spawner.ts).
outq = []
def send(kind, pid_id, payload=b""):
    outq.append(HEAD.pack(kind, pid_id, len(payload)) + payload)
def flush():
    data = b"".join(outq); outq.clear()
    while data:
        try:
            n = os.write(out.fileno(), data)
            data = data[n:]
        except BlockingIOError:
            sel = selectors.DefaultSelector(); sel.register(out.fileno(), selectors.EVENT_WRITE); sel.select(); sel.close()
sel = selectors.DefaultSelector()
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False); os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *a: None)
sel.register(inp.fileno(), selectors.EVENT_READ, ("in", None))
sel.register(wake_r, selectors.EVENT_READ, ("wake", None))
procs = {}
by_pid = {}
class Proc:
    def __init__(self, ident):
        self.id = ident; self.pid = 0; self.fds = {}; self.stdin = None; self.pending = []; self.eof = False
        self.credit = 0; self.status = None; self.done = False
        self.held = 0; self.unacked = []; self.unacked_bytes = 0
def watch(p):
    for kind, fd in list(p.fds.items()):
        try: sel.unregister(fd)
        except KeyError: pass
        if p.credit > 0: sel.register(fd, selectors.EVENT_READ, (kind, p))
    if p.stdin is not None:
        try: sel.unregister(p.stdin)
        except KeyError: pass
        if p.pending: sel.register(p.stdin, selectors.EVENT_WRITE, ("w", p))
def close_stdin(p):
    if p.stdin is None: return
    try: sel.unregister(p.stdin)
    except KeyError: pass
    os.close(p.stdin); p.stdin = None
def finish(p):
    if p.done or p.status is None or p.fds: return
    p.done = True
    send(b"z", p.id)
    forget(p)
def forget(p):
    release_acks(p, True)
    close_stdin(p)
    for fd in list(p.fds.values()):
        try: sel.unregister(fd)
        except KeyError: pass
        os.close(fd)
    p.fds = {}
    procs.pop(p.id, None)
def failed(program, err, e_w):
    # As a shell's exec would: a process that says why on its stderr and exits 127 (not found) or 126.
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.write(e_w, b"sbx: " + program[:256] + b": " + os.strerror(err.errno or 0).encode() + b"\n")
        finally:
            os._exit(127 if err.errno in (errno.ENOENT, errno.ENOTDIR) else 126)
    return pid
# Python ignores SIGPIPE and SIGXFSZ; a program exec'd from here must not inherit that (as subprocess restores them).
DEFAULT_SIGNALS = {signal.SIGPIPE, signal.SIGXFSZ}
def program(name, env):
    # As execvpe (and subprocess) would: a name without a slash is looked up in the process's own PATH.
    if b"/" in name: return name
    for d in os.get_exec_path(env):
        path = os.path.join(os.fsencode(d), name)
        if os.access(path, os.X_OK) and not os.path.isdir(path): return path
    raise FileNotFoundError(errno.ENOENT, "not found")
def start(ident, req):
    argv = [os.fsencode(a) for a in req["argv"]]
    env = dict(os.environ)
    for name, value in req["env"]: env[name] = value
    cwd = req["cwd"]
    env.update(PWD=cwd)
    if not os.path.isdir(cwd) or not os.access(cwd, os.X_OK):
        send(b"n", ident); return
    p = Proc(ident)
    i_r, i_w = os.pipe(); o_r, o_w = os.pipe(); e_r, e_w = os.pipe()
    try:
        # posix_spawn (a vfork, no copy of this interpreter's pages to fault in; a third of
        # subprocess.Popen's time). It has no cwd of its own: the child takes this one's.
        os.chdir(cwd)
        try:
            pid = os.posix_spawn(program(argv[0], env), argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, i_r, 0), (os.POSIX_SPAWN_DUP2, o_w, 1), (os.POSIX_SPAWN_DUP2, e_w, 2)], setsid=True, setsigdef=DEFAULT_SIGNALS)
        finally:
            os.chdir("/")
    except OSError as err:
        pid = failed(argv[0], err, e_w)
    os.close(i_r); os.close(o_w); os.close(e_w)
    for fd in (i_w, o_r, e_r): os.set_blocking(fd, False)
    p.pid = pid; p.stdin = i_w; p.fds = {"o": o_r, "e": e_r}
    procs[ident] = p; by_pid[pid] = p
    send(b"p", ident, str(pid).encode())
    watch(p)
def reap():
    while True:
        try: pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError: return
        if pid == 0: return
        p = by_pid.pop(pid, None)
        if p is None: continue
        if os.WIFSIGNALED(status):
            try: name = signal.Signals(os.WTERMSIG(status)).name[3:]
            except ValueError: name = str(os.WTERMSIG(status))
            p.status = b"s " + name.encode()
        else:
            p.status = b"c %d" % os.waitstatus_to_exitcode(status)
        send(b"x", p.id, p.status)
        finish(p)
def release_acks(p, everything=False):
    # A frame is acknowledged once what is acknowledged and not yet written stays within
    # WINDOW (as sshd's channel window takes input before the process reads it).
    while p.unacked and (everything or p.held - p.unacked_bytes + p.unacked[0] <= WINDOW or p.held < p.unacked_bytes):
        p.unacked_bytes -= p.unacked.pop(0); send(b"a", p.id)
def flush_stdin(p):
    while p.pending and p.stdin is not None:
        data = p.pending[0]
        try:
            n = os.write(p.stdin, data)
        except BlockingIOError:
            break
        except OSError:
            p.pending = []; p.held = 0; release_acks(p, True); close_stdin(p); return
        p.held -= n
        if n < len(data): p.pending[0] = data[n:]
        else: p.pending.pop(0)
    release_acks(p)
    if not p.pending and p.eof: close_stdin(p)
    if p.stdin is not None: watch(p)
def signal_session(sid, name):
    try: signum = signal.Signals["SIG" + name.decode("ascii")]
    except (KeyError, UnicodeDecodeError): return
    for entry in os.listdir("/proc"):
        if not entry.isdigit(): continue
        try:
            with open("/proc/" + entry + "/stat", "rb") as f: stat = f.read()
            # After the command's ")": state, ppid, pgrp, session.
            if int(stat[stat.rindex(b")") + 2:].split()[3]) == sid: os.kill(int(entry), signum)
        except (OSError, ValueError, IndexError):
            pass
def handle(kind, ident, payload):
    p = procs.get(ident)
    if kind == b"K":
        if p is not None and p.pid > 0: signal_session(p.pid, payload)
        send(b"k", ident)
    elif kind == b"S":
        if ident not in procs: start(ident, json.loads(payload))
    elif p is None:
        if kind == b"I": send(b"a", ident)
    elif kind == b"I":
        if p.stdin is None: send(b"a", ident)
        else:
            p.pending.append(payload); p.held += len(payload); p.unacked.append(len(payload)); p.unacked_bytes += len(payload)
            flush_stdin(p)
    elif kind == b"E":
        p.eof = True; flush_stdin(p)
    elif kind == b"G":
        if len(payload) == 4:
            p.credit += struct.unpack(">I", payload)[0]; watch(p)
    elif kind == b"C":
        p.done = True; forget(p)
buf = b""
send(b"h", 0)
flush()
while True:
    for key, _ in sel.select():
        what, p = key.data
        if what == "in":
            try: chunk = os.read(inp.fileno(), 262144)
            except BlockingIOError: continue
            if not chunk: sys.exit(0)
            buf += chunk
            while len(buf) >= HEAD.size:
                kind, ident, length = HEAD.unpack_from(buf)
                if len(buf) < HEAD.size + length: break
                payload = buf[HEAD.size:HEAD.size + length]; buf = buf[HEAD.size + length:]
                handle(kind, ident, payload)
        elif what == "wake":
            try: os.read(wake_r, 4096)
            except BlockingIOError: pass
            reap()
        elif what == "w":
            if p.id in procs: flush_stdin(p)
        elif p.id in procs and key.fd in p.fds.values():
            if p.credit <= 0: continue
            try: data = os.read(key.fd, min(CHUNK, p.credit))
            except BlockingIOError: continue
            except OSError: data = b""
            if data:
                p.credit -= len(data)
                send(b"o" if what == "o" else b"e", p.id, data)
                if p.credit <= 0: watch(p)
            else:
                sel.unregister(key.fd); os.close(key.fd); del p.fds[what]
                finish(p)
    reap()
    flush()
`;
