// Test-only native attacks, compiled only with the `test-hooks` feature: what native code that took
// over an engine process (through a V8 exploit) would try, run from inside a real, sandboxed engine
// process so that a test can check that each one fails. Nothing here is in a shipped binary.
//
// Ownership: every descriptor opened here is closed here; the caller owns `detail` (at least
// `detail_len` bytes) and gets a NUL-terminated description in it.

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <condition_variable>
#include <mutex>
#include <vector>

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

namespace {

int refused(char* detail, size_t detail_len, const char* what) {
  snprintf(detail, detail_len, "%s: %s (errno %d)", what, strerror(errno), errno);
  return 0;
}

int allowed(char* detail, size_t detail_len, const std::string& what) {
  snprintf(detail, detail_len, "%s", what.c_str());
  return 1;
}

}  // namespace

extern "C" int cm_attack_probe(const char* attack, const char* target, char* detail,
                               size_t detail_len) {
  std::string name(attack);
  pid_t pid = static_cast<pid_t>(strtol(target, nullptr, 10));
  if (name == "read") {
    // Read a file: /proc/<parent>/environ, the token file, a store document.
    int fd = open(target, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return refused(detail, detail_len, "open");
    char buffer[64];
    ssize_t got = read(fd, buffer, sizeof buffer);
    int saved = errno;
    close(fd);
    errno = saved;
    if (got < 0) return refused(detail, detail_len, "read");
    return allowed(detail, detail_len, "read " + std::to_string(got) + " bytes");
  }
  if (name == "mem") {
    // Open another process's memory and read from it.
    std::string path = "/proc/" + std::string(target) + "/mem";
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return refused(detail, detail_len, "open mem");
    char byte;
    ssize_t got = pread(fd, &byte, 1, 0x400000);
    close(fd);
    return allowed(detail, detail_len, "opened mem (pread gave " + std::to_string(got) + ")");
  }
  if (name == "stat") {
    struct stat status;
    if (stat(target, &status) != 0) return refused(detail, detail_len, "stat");
    return allowed(detail, detail_len,
                   "saw " + std::to_string(status.st_size) + " bytes, changed at " +
                       std::to_string(status.st_mtime));
  }
  if (name == "list") {
    DIR* folder = opendir(target);
    if (folder == nullptr) return refused(detail, detail_len, "opendir");
    int entries = 0;
    while (readdir(folder) != nullptr) entries++;
    closedir(folder);
    return allowed(detail, detail_len, "listed " + std::to_string(entries) + " entries");
  }
  if (name == "kill") {
    // Signal 0: the permission check without the signal.
    if (kill(pid, 0) != 0) return refused(detail, detail_len, "kill");
    return allowed(detail, detail_len, "may signal " + std::string(target));
  }
  if (name == "prlimit") {
    struct rlimit current;
    if (prlimit(pid, RLIMIT_NOFILE, nullptr, &current) != 0)
      return refused(detail, detail_len, "prlimit get");
    if (prlimit(pid, RLIMIT_NOFILE, &current, nullptr) != 0)
      return refused(detail, detail_len, "prlimit set");
    return allowed(detail, detail_len, "set the limits of " + std::string(target));
  }
  if (name == "setpriority") {
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, pid);
    if (nice == -1 && errno != 0) return refused(detail, detail_len, "getpriority");
    if (setpriority(PRIO_PROCESS, pid, nice) != 0) return refused(detail, detail_len, "setpriority");
    return allowed(detail, detail_len, "reniced " + std::string(target));
  }
  if (name == "setaffinity") {
    cpu_set_t set;
    if (sched_getaffinity(pid, sizeof set, &set) != 0)
      return refused(detail, detail_len, "sched_getaffinity");
    if (sched_setaffinity(pid, sizeof set, &set) != 0)
      return refused(detail, detail_len, "sched_setaffinity");
    return allowed(detail, detail_len, "rescheduled " + std::string(target));
  }
  if (name == "clone3") {
    // A new process in a new user namespace, the way clone3 hides its flags from a filter.
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER;
    args.exit_signal = SIGCHLD;
    long child = syscall(SYS_clone3, &args, sizeof args);
    if (child == 0) syscall(SYS_exit, 0);
    if (child < 0) return refused(detail, detail_len, "clone3");
    return allowed(detail, detail_len, "started process " + std::to_string(child));
  }
  if (name == "io_uring") {
    // A ring's requests pass no system call a filter could see: make one, or submit on a ring the
    // process already holds (Node's event loops batch epoll changes through one).
    struct {
      uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd,
          resv[3];
      uint64_t offsets[10];
    } params;
    memset(&params, 0, sizeof params);
    long ring = syscall(SYS_io_uring_setup, 4, &params);
    if (ring >= 0) {
      close(static_cast<int>(ring));
      return allowed(detail, detail_len, "made an io_uring");
    }
    int setup_errno = errno;
    if (DIR* fds = opendir("/proc/self/fd")) {
      while (struct dirent* entry = readdir(fds)) {
        std::string path = std::string("/proc/self/fd/") + entry->d_name;
        char link[64];
        ssize_t length = readlink(path.c_str(), link, sizeof link - 1);
        if (length <= 0) continue;
        link[length] = 0;
        if (strcmp(link, "anon_inode:[io_uring]") != 0) continue;
        int fd = atoi(entry->d_name);
        if (syscall(SYS_io_uring_enter, fd, 0, 0, 0, nullptr, 0) >= 0) {
          closedir(fds);
          return allowed(detail, detail_len, "entered the io_uring " + std::string(entry->d_name));
        }
      }
      closedir(fds);
    }
    errno = setup_errno;
    return refused(detail, detail_len, "io_uring_setup and io_uring_enter");
  }
  if (name == "fork") {
    long child = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (child == 0) syscall(SYS_exit, 0);
    if (child < 0) return refused(detail, detail_len, "clone");
    return allowed(detail, detail_len, "started process " + std::to_string(child));
  }
  if (name == "tty") {
    int fd = open("/dev/tty", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return refused(detail, detail_len, "open /dev/tty");
    close(fd);
    return allowed(detail, detail_len, "opened the controlling terminal");
  }
  if (name == "tiocsti") {
    // On the descriptor given (a pipe here): only the filter answers EPERM; a kernel that ran the
    // request answers ENOTTY, which means the filter let it through.
    char letter = 'x';
    int fd = static_cast<int>(pid);
    if (ioctl(fd, TIOCSTI, &letter) != 0 && errno == EPERM)
      return refused(detail, detail_len, "ioctl TIOCSTI");
    return allowed(detail, detail_len,
                   std::string("ioctl TIOCSTI reached the kernel: ") + strerror(errno));
  }
  if (name == "ptrace") {
    if (ptrace(PTRACE_ATTACH, pid, nullptr, nullptr) != 0) return refused(detail, detail_len, "ptrace");
    ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
    return allowed(detail, detail_len, "attached to " + std::string(target));
  }
  if (name == "vm_readv") {
    char byte;
    struct iovec local = {&byte, 1};
    struct iovec remote = {reinterpret_cast<void*>(0x400000), 1};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) < 0 && errno != EFAULT)
      return refused(detail, detail_len, "process_vm_readv");
    return allowed(detail, detail_len, "read another process's memory");
  }
  if (name == "socket") {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return refused(detail, detail_len, "socket");
    close(fd);
    return allowed(detail, detail_len, "made a socket");
  }
  if (name == "mmap") {
    // Map 5 GiB past RLIMIT_DATA: shared anonymous memory (`shared`) or a grows-down mapping
    // (`growsdown`) is not counted by that limit, so only refusing the mapping bounds it.
    int flags = MAP_ANONYMOUS | MAP_NORESERVE;
    if (std::string(target) == "shared") {
      flags |= MAP_SHARED;
    } else if (std::string(target) == "growsdown") {
      flags |= MAP_PRIVATE | MAP_GROWSDOWN;
    } else {
      flags |= MAP_PRIVATE;
    }
    size_t length = std::string(target) == "small" ? (1u << 20) : (5ull << 30);
    void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (mapped == MAP_FAILED) return refused(detail, detail_len, "mmap");
    munmap(mapped, length);
    return allowed(detail, detail_len, "mapped " + std::to_string(length) + " bytes");
  }
  if (name == "sockets") {
    // The host's sockets, as its network namespace lists them: any line past the header of
    // /proc/self/net/tcp, tcp6 or unix names one.
    int listed = 0;
    for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6", "/proc/self/net/unix"}) {
      FILE* file = fopen(table, "re");
      if (file == nullptr) continue;
      char line[512];
      int lines = 0;
      while (fgets(line, sizeof line, file) != nullptr) lines++;
      fclose(file);
      if (lines > 1) listed += lines - 1;
    }
    if (listed == 0) {
      errno = ENOENT;
      return refused(detail, detail_len, "no socket of the host listed");
    }
    return allowed(detail, detail_len, "listed " + std::to_string(listed) + " sockets");
  }
  if (name == "threads") {
    // As many threads as the target says (small stacks, so that only the count binds), each
    // waiting until all have been tried; then all end.
    long wanted = strtol(target, nullptr, 10);
    static std::mutex gate;
    static std::condition_variable opened;
    static bool open = false;
    {
      std::lock_guard<std::mutex> lock(gate);
      open = false;
    }
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setstacksize(&attributes, 64 * 1024);
    std::vector<pthread_t> started;
    int failure = 0;
    for (long index = 0; index < wanted; index++) {
      pthread_t thread;
      failure = pthread_create(
          &thread, &attributes,
          [](void*) -> void* {
            std::unique_lock<std::mutex> lock(gate);
            opened.wait(lock, [] { return open; });
            return nullptr;
          },
          nullptr);
      if (failure != 0) break;
      started.push_back(thread);
    }
    pthread_attr_destroy(&attributes);
    {
      std::lock_guard<std::mutex> lock(gate);
      open = true;
    }
    opened.notify_all();
    for (pthread_t thread : started) pthread_join(thread, nullptr);
    if (failure != 0) {
      errno = failure;
      std::string what = "pthread_create after " + std::to_string(started.size()) + " threads";
      return refused(detail, detail_len, what.c_str());
    }
    return allowed(detail, detail_len, "started " + std::to_string(started.size()) + " threads");
  }
  if (name == "dumpable") {
    int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    if (dumpable == 0) {
      errno = EPERM;
      return refused(detail, detail_len, "not dumpable");
    }
    return allowed(detail, detail_len, "dumpable");
  }
  errno = EINVAL;
  return refused(detail, detail_len, "unknown attack");
}
