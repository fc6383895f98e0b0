/*
 * mirror: the /proc and NVML reads of stallwatch as they were before the
 * read-by-need change, and nothing else, for scripts/bench-overhead to
 * measure the daemon against (`--only mirror`). Until that change it was
 * the benchmark's floor; the floor is now floor.c, a naive reader.
 *
 * Every interval it makes the NVML calls stallwatch makes per GPU (nvml.h,
 * shared with floor.c: the same symbols, the same count-then-fill protocol;
 * the stand-in GPUs of the benchmark have no GPM and no MIG, so neither
 * costs more than the mode query; the fault state in one field-values call;
 * and, on a second thread, waits on one Xid event set holding every GPU, as
 * the daemon's events thread does) and reads the /proc files the daemon
 * read per job, process and thread before that change (the same files, kept
 * open and read again from offset 0: each process's `stat` and `io`, each
 * thread's `schedstat` and its `stat` only when the thread ran, is new or
 * its process is due (every 10 samples, staggered by pid); no thread of a
 * quiet process (all its threads asleep when last read, its CPU ticks and
 * io counters the same since, not due; `io` read first, as its counters
 * count as activity); `children` files every 5 samples; the task directory
 * of each multi-threaded process listed when its thread count changed, a
 * thread vanished, or it is due), each job's `cgroup` and the files behind
 * its stdout and stderr, and the host's files. It parses only the fields a
 * monitor uses and keeps nothing else: no history, no diagnosis, no HTTP.
 *
 *   mirror LIBNVML [INTERVAL_MS]
 *
 * Runs until SIGTERM or SIGINT. On SIGUSR1 it prints one line after the next
 * sample: `gpus=N jobs=N processes=N threads=N samples=N` (what it read), so
 * the benchmark can check that it saw the load.
 *
 * Build: cc -O2 -pthread -o mirror mirror.c -ldl
 */
#define _GNU_SOURCE
#define PROG "mirror"
#include <dirent.h>
#include <sys/stat.h>

#include "nvml.h"
#include "reader.h"

#define CHILDREN_EVERY 5
#define CHILDREN_QUIET 30 /* ... while the last pid given out has not moved */
#define REFRESH 10 /* samples between two reads of a quiet thread's stat */

static unsigned grace(int kind) {
    return kind == KIDS ? CHILDREN_QUIET + 1 : kind == TSTAT || kind == SCHED ? REFRESH + 1 : 1;
}

/* --------------------------------------------------------------- jobs */

/* asleep_cpu, asleep_io: the process's CPU ticks + 1 and io counters when its
 * threads were last read and all asleep; asleep_cpu 0 when not. */
typedef struct { unsigned pid, ntids, nkids, read_at, used, *tids, *kids; unsigned long long start, asleep_cpu, asleep_io[4], last_pid; } proc_memo_t;
/* Per process, by pid: a linear-probing table whose entries not used for two
 * samples are reused. */
#define NMEMOS (1 << 15)
static proc_memo_t memos[NMEMOS];
static unsigned long long last_pid;

static proc_memo_t *memo_for(unsigned pid) {
    size_t i = (pid * 2654435761u) & (NMEMOS - 1);
    proc_memo_t *reuse = NULL;
    for (;; i = (i + 1) & (NMEMOS - 1)) {
        proc_memo_t *m = &memos[i];
        if (m->pid == pid) {
            m->used = sample_no;
            return m;
        }
        if (m->pid == 0)
            break;
        if (!reuse && m->used + 2 < sample_no)
            reuse = m;
    }
    proc_memo_t *m = reuse ? reuse : &memos[i];
    free(m->tids), free(m->kids);
    *m = (proc_memo_t){.pid = pid, .used = sample_no};
    return m;
}

/* Per thread: its last schedstat, in a table like the one above. */
typedef struct { unsigned tid, used; unsigned long long sched[3]; char state; } thread_memo_t;
#define NTHREADS (1 << 15)
static thread_memo_t thread_memos[NTHREADS];

static thread_memo_t *thread_memo(unsigned tid) {
    size_t i = (tid * 2654435761u) & (NTHREADS - 1);
    thread_memo_t *reuse = NULL;
    for (;; i = (i + 1) & (NTHREADS - 1)) {
        thread_memo_t *m = &thread_memos[i];
        if (m->tid == tid) return m;
        if (m->tid == 0) break;
        if (!reuse && m->used + 2 < sample_no) reuse = m;
    }
    thread_memo_t *m = reuse ? reuse : &thread_memos[i];
    *m = (thread_memo_t){.tid = tid};
    return m;
}

/* The memo of a thread seen in the last sample, or NULL. */
static thread_memo_t *thread_seen(unsigned tid) {
    for (size_t i = (tid * 2654435761u) & (NTHREADS - 1);; i = (i + 1) & (NTHREADS - 1)) {
        thread_memo_t *m = &thread_memos[i];
        if (m->tid == tid) return m->used + 1 == sample_no ? m : NULL;
        if (m->tid == 0) return NULL;
    }
}

/* One thread of process `pid`: its schedstat, and its stat when it ran, is
 * new or its process is due. Returns its state, or -1. */
static int thread(const char *dir, unsigned pid, unsigned tid) {
    char path[96];
    snprintf(path, sizeof path, "%s/task/%u/schedstat", dir, tid);
    if (read_kept(tid, SCHED, path) < 0) return -1;
    unsigned long long s[3];
    char *p = buf;
    for (int i = 0; i < 3; i++) s[i] = strtoull(p, &p, 10);
    thread_memo_t *m = thread_memo(tid);
    int due = (sample_no + pid) % REFRESH == 0;
    if (fresh || due || m->used + 1 != sample_no || memcmp(s, m->sched, sizeof s)) {
        snprintf(path, sizeof path, "%s/task/%u/stat", dir, tid);
        stat_t t;
        if (read_kept(tid, TSTAT, path) < 0 || parse_stat(&t) < 0) return -1;
        m->state = t.state;
    }
    memcpy(m->sched, s, sizeof s);
    m->used = sample_no;
    sink += s[0] + m->state;
    return m->state;
}

/* A quiet process (its threads all asleep when last read, its CPU ticks the
 * same since, not due): its threads are carried as they were, none read.
 * Returns 0 when one of them is not known from the last sample. */
static int carry(proc_memo_t *m) {
    for (unsigned i = 0; i < m->ntids; i++)
        if (!thread_seen(m->tids[i])) return 0;
    for (unsigned i = 0; i < m->ntids; i++) {
        thread_memo_t *t = thread_seen(m->tids[i]);
        t->used = sample_no;
        sink += t->sched[0] + t->state;
    }
    return 1;
}

static void add_pids(unsigned **list, unsigned *n, const char *text) {
    for (const char *p = text; *p;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p) break;
        *list = realloc(*list, (*n + 1) * sizeof **list);
        (*list)[(*n)++] = v;
        p = end;
    }
}

static int cmp_u(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* Lists the task directory into m->tids. */
static void list_tasks(const char *dir, proc_memo_t *m) {
    char path[64];
    snprintf(path, sizeof path, "%s/task", dir);
    DIR *d = opendir(path);
    m->ntids = 0;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            m->tids = realloc(m->tids, (m->ntids + 1) * sizeof *m->tids);
            m->tids[m->ntids++] = strtoul(e->d_name, NULL, 10);
        }
    closedir(d);
    qsort(m->tids, m->ntids, sizeof *m->tids, cmp_u);
}

/* One process: its stat, threads, io; the children (every few samples). */
static int process(unsigned pid, unsigned expected_parent, unsigned **kids, unsigned *nkids) {
    char dir[32], path[96];
    stat_t st;
    snprintf(dir, sizeof dir, "/proc/%u", pid);
    snprintf(path, sizeof path, "%s/stat", dir);
    if (read_kept(pid, STAT, path) < 0 || parse_stat(&st) < 0)
        return -1;
    if (expected_parent && st.ppid != expected_parent)
        return -1;
    nprocesses++;
    sink += st.cpu + st.rss;
    int due = (sample_no + pid) % REFRESH == 0;
    proc_memo_t *m = memo_for(pid);
    if (m->start != st.start)
        m->ntids = 0, m->asleep_cpu = 0;
    unsigned age = sample_no - m->read_at;
    int refresh = m->start != st.start ||
                  (age >= CHILDREN_EVERY && !(last_pid && m->last_pid == last_pid && age < CHILDREN_QUIET));
    unsigned long long io[4] = {0};
    snprintf(path, sizeof path, "%s/io", dir);
    if (read_kept(pid, IO, path) >= 0) {
        io[0] = field_after(buf, "rchar: "), io[1] = field_after(buf, "wchar: ");
        io[2] = field_after(buf, "read_bytes: "), io[3] = field_after(buf, "\nwrite_bytes: ");
        sink += io[0] + io[1] + io[2] + io[3];
    }
    if (refresh) {
        m->start = st.start, m->read_at = sample_no, m->nkids = 0, m->last_pid = last_pid;
    }
    if (st.threads == 1) {
        nthreads++;
        if (refresh) {
            snprintf(path, sizeof path, "%s/task/%u/children", dir, pid);
            if (read_kept(pid, KIDS, path) >= 0) add_pids(&m->kids, &m->nkids, buf);
        }
    } else if (!due && m->ntids == st.threads && m->asleep_cpu == st.cpu + 1 &&
               !memcmp(m->asleep_io, io, sizeof io) && carry(m)) {
        nthreads += m->ntids;
        for (unsigned i = 0; refresh && i < m->ntids; i++) {
            snprintf(path, sizeof path, "%s/task/%u/children", dir, m->tids[i]);
            if (read_kept(m->tids[i], KIDS, path) >= 0) add_pids(&m->kids, &m->nkids, buf);
        }
    } else {
        if (m->ntids != st.threads || due)
            list_tasks(dir, m);
        int asleep = 1;
        for (int pass = 0; pass < 2; pass++) {
            int vanished = 0;
            asleep = 1;
            if (refresh)
                m->nkids = 0;
            for (unsigned i = 0; i < m->ntids; i++) {
                unsigned tid = m->tids[i];
                int state = thread(dir, pid, tid);
                if (state < 0) {
                    vanished = 1;
                    continue;
                }
                asleep &= state == 'S';
                nthreads++;
                if (refresh) {
                    snprintf(path, sizeof path, "%s/task/%u/children", dir, tid);
                    if (read_kept(tid, KIDS, path) >= 0) add_pids(&m->kids, &m->nkids, buf);
                }
            }
            if (!vanished) break;
            list_tasks(dir, m); /* and read again, once */
        }
        m->asleep_cpu = asleep && m->ntids == st.threads ? st.cpu + 1 : 0;
        memcpy(m->asleep_io, io, sizeof io);
    }
    *kids = m->kids, *nkids = m->nkids;
    return 0;
}

static void job(unsigned leader) {
    unsigned *kids, nkids;
    if (process(leader, 0, &kids, &nkids) < 0)
        return;
    char path[64];
    struct stat sb;
    snprintf(path, sizeof path, "/proc/%u/cgroup", leader);
    if (read_kept(leader, CGROUP, path) > 0) sink += buf[0];
    for (int fd = 1; fd <= 2; fd++) {
        snprintf(path, sizeof path, "/proc/%u/fd/%d", leader, fd);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) sink += sb.st_size + sb.st_mtim.tv_nsec;
    }
    /* breadth first, each pid once, stopping at other GPU holders */
    static unsigned queue[65536][2];
    size_t head = 0, tail = 0;
    for (unsigned i = 0; i < nkids && tail < 65536; i++)
        queue[tail][0] = kids[i], queue[tail++][1] = leader;
    while (head < tail) {
        unsigned pid = queue[head][0], parent = queue[head++][1], holder = 0;
        for (unsigned j = 0; j < npids; j++) holder |= pids[j] == pid;
        if (holder) continue;
        if (process(pid, parent, &kids, &nkids) < 0) continue;
        for (unsigned i = 0; i < nkids && tail < 65536; i++)
            queue[tail][0] = kids[i], queue[tail++][1] = pid;
    }
}

/* --------------------------------------------------------------- host */

/* A file read once, not kept. */
static ssize_t read_once(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

static void host(void) {
    if (read_once("/proc/stat") > 0)
        for (char *p = buf; (p = strstr(p, "cpu")); p += 3) {
            char *q = p + 3;
            while (*q && *q != ' ') q++;
            for (int i = 0; i < 8; i++) sink += strtoull(q, &q, 10);
        }
    if (read_once("/proc/meminfo") > 0)
        sink += field_after(buf, "MemTotal:") + field_after(buf, "MemAvailable:") +
                field_after(buf, "SwapTotal:") + field_after(buf, "SwapFree:");
    const char *psi[] = {"/proc/pressure/cpu", "/proc/pressure/io", "/proc/pressure/memory"};
    for (int i = 0; i < 3; i++)
        if (read_once(psi[i]) > 0) {
            char *p = strstr(buf, "avg10=");
            if (p) sink += (unsigned long long)(strtod(p + 6, NULL) * 100);
            if ((p = strstr(buf, "full avg10="))) sink += (unsigned long long)(strtod(p + 11, NULL) * 100);
        }
}

/* --------------------------------------------------------------- main */

static void sample(void) {
    /* The last pid given out (loadavg's fifth field), before any children
     * file: while it stays, no process was made (0: unknown). */
    last_pid = 0;
    if (read_kept(0, LOADAVG, "/proc/loadavg") > 0) {
        char *p = buf;
        for (int f = 0; f < 4 && p; f++) p = strchr(p + 1, ' ');
        if (p) last_pid = strtoull(p + 1, NULL, 10);
    }
    for (unsigned i = 0; i < npids; i++) job(pids[i]);
    host();
}

int main(int argc, char **argv) { return run(argc, argv); }
