/*
 * floor: a naive GPU-and-job monitor that reads everything every second,
 * for scripts/bench-overhead to measure stallwatch against. It is what a
 * monitor costs that reads all it might need each sample and decides
 * nothing about what it can skip.
 *
 * Every interval:
 *   - every GPU's NVML values, the same calls as mirror.c makes (nvml.h,
 *     shared with it), the GPU processes from the compute, graphics and MPS
 *     process lists, and on a second thread the wait on one Xid event set
 *     holding every GPU;
 *   - for every job (a GPU process, and its descendants, found through the
 *     `children` file of each of its threads, read every sample; a
 *     descendant that is itself a GPU process is left to its own job):
 *     each process's `stat`, `io` and `statm`, its task directory listed,
 *     and every thread's `/proc/<pid>/task/<tid>/stat`.
 * Nothing else: no host files, no cgroup, no history, no HTTP. The /proc
 * files are kept open and read again with pread from offset 0 (reader.h,
 * shared with mirror.c); a file not read for a sample is closed at the next
 * sweep of the table (every 8 samples). It parses only the fields a
 * monitor uses: the state, CPU ticks, thread count and RSS of a `stat`, the
 * four byte counters of `io`, the first three fields of `statm`.
 *
 *   floor LIBNVML [INTERVAL_MS]
 *
 * Runs until SIGTERM or SIGINT. On SIGUSR1 it prints one line after the next
 * sample: `gpus=N jobs=N processes=N threads=N samples=N` (what it read), so
 * the benchmark can check that it saw the load.
 *
 * Build: cc -O2 -pthread -o floor floor.c -ldl
 */
#define _GNU_SOURCE
#define PROG "floor"
#include <dirent.h>

#include "nvml.h"
#include "reader.h"

static unsigned grace(int kind) {
    (void)kind;
    return 1; /* everything is read every sample */
}

/* The processes still to read in this job: a stack of pids. */
#define MAX_TODO 65536
static unsigned todo[MAX_TODO], ntodo;

static void push_pids(const char *text) {
    for (const char *p = text; *p && ntodo < MAX_TODO;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p) break;
        todo[ntodo++] = v;
        p = end;
    }
}

/* One thread: its stat, and its children pushed to the stack. */
static void read_thread(unsigned pid, unsigned tid) {
    char path[80];
    stat_t t;
    snprintf(path, sizeof path, "/proc/%u/task/%u/stat", pid, tid);
    if (read_kept(tid, TSTAT, path) < 0 || parse_stat(&t) < 0)
        return;
    nthreads++;
    sink += t.state + t.cpu;
    snprintf(path, sizeof path, "/proc/%u/task/%u/children", pid, tid);
    if (read_kept(tid, KIDS, path) > 0)
        push_pids(buf);
}

/* One process: stat, io, statm, then every thread. */
static void read_process(unsigned pid) {
    char path[64];
    stat_t st;
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    if (read_kept(pid, STAT, path) < 0 || parse_stat(&st) < 0)
        return;
    nprocesses++;
    sink += st.cpu + st.rss + st.threads;
    snprintf(path, sizeof path, "/proc/%u/io", pid);
    if (read_kept(pid, IO, path) > 0)
        sink += field_after(buf, "rchar: ") + field_after(buf, "wchar: ") +
                field_after(buf, "read_bytes: ") + field_after(buf, "\nwrite_bytes: ");
    snprintf(path, sizeof path, "/proc/%u/statm", pid);
    if (read_kept(pid, STATM, path) > 0) {
        char *p = buf;
        for (int i = 0; i < 3; i++) sink += strtoull(p, &p, 10);
    }
    snprintf(path, sizeof path, "/proc/%u/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            read_thread(pid, strtoul(e->d_name, NULL, 10));
    closedir(d);
}

static int gpu_process(unsigned pid) {
    for (unsigned j = 0; j < npids; j++)
        if (pids[j] == pid) return 1;
    return 0;
}

static void sample(void) {
    for (unsigned i = 0; i < npids; i++) {
        ntodo = 0;
        read_process(pids[i]);
        while (ntodo > 0) {
            unsigned pid = todo[--ntodo];
            if (!gpu_process(pid))
                read_process(pid);
        }
    }
}

int main(int argc, char **argv) { return run(argc, argv); }
