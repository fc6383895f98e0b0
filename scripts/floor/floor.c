/*
 * floor: the least work any GPU-and-job monitor must do at stallwatch's load
 * and interval, for scripts/bench-overhead to measure the daemon against.
 *
 * Every interval it makes the NVML calls stallwatch makes per GPU (the same
 * symbols, the same count-then-fill protocol; the stand-in GPUs of the
 * benchmark have no GPM and no MIG, so neither costs more than the mode query;
 * the fault state in one field-values call; and, on a second thread, waits
 * on one Xid event set holding every GPU, as the daemon's events thread
 * does) and reads the /proc files stallwatch reads per job, process and thread (the same files, kept open and
 * read again from offset 0: each process's `stat` and `io`, each thread's
 * `schedstat` and its `stat` only when the thread ran, is new or its process
 * is due (every 10 samples, staggered by pid); no thread of a quiet process
 * (all its threads asleep when last read, its CPU ticks and io counters the same since, not
 * due; `io` read first, as its counters count as activity); `children`
 * files every 5 samples; the task directory of each
 * multi-threaded process listed when its thread count changed, a thread
 * vanished, or it is due), and the host's files. It parses only the
 * fields a monitor uses and keeps nothing else: no history, no diagnosis, no
 * HTTP.
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
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int ret_t;
typedef void *dev_t_;
#define INSUFFICIENT_SIZE 7
#define CHILDREN_EVERY 5
#define CHILDREN_QUIET 30 /* ... while the last pid given out has not moved */
#define REFRESH 10 /* samples between two reads of a quiet thread's stat */

/* ------------------------------------------------------------------ NVML */

typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem_v2_t;
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } proc_t;
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem, enc, dec; } putil_t;

static ret_t (*Init)(void);
static ret_t (*DriverVersion)(char *, unsigned);
static ret_t (*Count)(unsigned *);
static ret_t (*Handle)(unsigned, dev_t_ *);
static ret_t (*Uuid)(dev_t_, char *, unsigned);
static ret_t (*Util)(dev_t_, util_t *);
static ret_t (*Mem)(dev_t_, mem_v2_t *);
static ret_t (*Temp)(dev_t_, int, unsigned *);
static ret_t (*Power)(dev_t_, unsigned *);
static ret_t (*Limit)(dev_t_, unsigned *);
static ret_t (*Energy)(dev_t_, unsigned long long *);
static ret_t (*Clock)(dev_t_, int, unsigned *);
static ret_t (*Throttle)(dev_t_, unsigned long long *);
static ret_t (*Pcie)(dev_t_, int, unsigned *);
static ret_t (*Compute)(dev_t_, unsigned *, proc_t *);
static ret_t (*Graphics)(dev_t_, unsigned *, proc_t *);
static ret_t (*Mps)(dev_t_, unsigned *, proc_t *);
static ret_t (*ProcUtil)(dev_t_, putil_t *, unsigned *, unsigned long long);
static ret_t (*MigMode)(dev_t_, unsigned *, unsigned *);
typedef struct { unsigned field, scope; long long ts, latency; unsigned type, ret; unsigned long long value; } field_t;
static ret_t (*Fields)(dev_t_, int, field_t *);
typedef void *set_t;
typedef struct { dev_t_ device; unsigned long long type, data; unsigned gi, ci; } event_t;
static ret_t (*SetCreate)(set_t *);
static ret_t (*SupportedEvents)(dev_t_, unsigned long long *);
static ret_t (*Register)(dev_t_, unsigned long long, set_t);
static ret_t (*Wait)(set_t, event_t *, unsigned);

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "floor: %s lacks %s\n", "the NVML library", name);
        exit(2);
    }
    return f;
}

static void load_nvml(const char *path) {
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "floor: cannot load %s: %s\n", path, dlerror());
        exit(2);
    }
    Init = sym(lib, "nvmlInit_v2");
    DriverVersion = sym(lib, "nvmlSystemGetDriverVersion");
    Count = sym(lib, "nvmlDeviceGetCount_v2");
    Handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
    Uuid = sym(lib, "nvmlDeviceGetUUID");
    Util = sym(lib, "nvmlDeviceGetUtilizationRates");
    Mem = sym(lib, "nvmlDeviceGetMemoryInfo_v2");
    Temp = sym(lib, "nvmlDeviceGetTemperature");
    Power = sym(lib, "nvmlDeviceGetPowerUsage");
    Limit = sym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    Energy = sym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    Clock = sym(lib, "nvmlDeviceGetClockInfo");
    Throttle = sym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    Pcie = sym(lib, "nvmlDeviceGetPcieThroughput");
    Compute = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    Graphics = sym(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    Mps = sym(lib, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
    ProcUtil = sym(lib, "nvmlDeviceGetProcessUtilization");
    MigMode = sym(lib, "nvmlDeviceGetMigMode");
    Fields = sym(lib, "nvmlDeviceGetFieldValues");
    SetCreate = sym(lib, "nvmlEventSetCreate");
    SupportedEvents = sym(lib, "nvmlDeviceGetSupportedEventTypes");
    Register = sym(lib, "nvmlDeviceRegisterEvents");
    Wait = sym(lib, "nvmlEventSetWait_v2");
    char version[80];
    if (Init() != 0 || DriverVersion(version, sizeof version) != 0) {
        fprintf(stderr, "floor: NVML did not initialise\n");
        exit(2);
    }
}

static unsigned long long sink; /* keeps what is read from being optimised away */

/* A process list, count then fill with headroom, as nvml-wrapper does. */
static unsigned process_list(ret_t (*f)(dev_t_, unsigned *, proc_t *), dev_t_ d, proc_t *out, unsigned cap) {
    unsigned n = 0;
    if (f(d, &n, NULL) != INSUFFICIENT_SIZE || n == 0)
        return 0;
    n += 5;
    if (n > cap)
        n = cap;
    if (f(d, &n, out) != 0)
        return 0;
    return n;
}

#define MAX_PIDS 4096
static unsigned pids[MAX_PIDS], npids;
static unsigned long long last_seen[64];

static unsigned read_gpus(void) {
    static proc_t procs[768];
    static putil_t samples[512];
    unsigned count = 0;
    npids = 0;
    if (Count(&count) != 0)
        return 0;
    for (unsigned i = 0; i < count && i < 64; i++) {
        dev_t_ d;
        if (Handle(i, &d) != 0)
            continue;
        char uuid[96];
        util_t u;
        mem_v2_t m = {.version = 0x02000028};
        unsigned v;
        unsigned long long e;
        Uuid(d, uuid, sizeof uuid);
        sink += uuid[4];
        if (Util(d, &u) == 0) sink += u.gpu + u.memory;
        if (Mem(d, &m) == 0) sink += m.used;
        if (Temp(d, 0, &v) == 0) sink += v;
        if (Power(d, &v) == 0) sink += v;
        if (Limit(d, &v) == 0) sink += v;
        if (Energy(d, &e) == 0) sink += e;
        if (Clock(d, 1, &v) == 0) sink += v;
        if (Clock(d, 2, &v) == 0) sink += v;
        if (Throttle(d, &e) == 0) sink += e;
        if (Pcie(d, 0, &v) == 0) sink += v;
        if (Pcie(d, 1, &v) == 0) sink += v;
        /* MIG: the mode, through a handle of its own as the daemon does */
        dev_t_ parent;
        unsigned current, pending;
        if (Handle(i, &parent) == 0 && MigMode(parent, &current, &pending) == 0) sink += current;
        /* ECC, retirement, NVLink, remapping and recovery state: one call */
        static const unsigned ids[] = {3, 4, 29, 30, 31, 38, 45, 52, 59, 142, 143, 144, 145, 230};
        field_t fields[14] = {0};
        for (int k = 0; k < 14; k++) fields[k].field = ids[k];
        if (Fields(d, 14, fields) == 0)
            for (int k = 0; k < 14; k++) sink += fields[k].value;
        unsigned n = process_list(Compute, d, procs, 256);
        n += process_list(Graphics, d, procs + n, 256);
        n += process_list(Mps, d, procs + n, 256);
        for (unsigned k = 0; k < n && npids < MAX_PIDS; k++) {
            unsigned seen = 0;
            for (unsigned j = 0; j < npids; j++)
                seen |= pids[j] == procs[k].pid;
            if (!seen)
                pids[npids++] = procs[k].pid;
            sink += procs[k].used;
        }
        if (n == 0)
            continue;
        unsigned s = 0;
        if (ProcUtil(d, NULL, &s, last_seen[i]) != INSUFFICIENT_SIZE || s == 0)
            continue;
        if (s > 512)
            s = 512;
        if (ProcUtil(d, samples, &s, last_seen[i]) == 0)
            for (unsigned k = 0; k < s; k++)
                if (samples[k].ts > last_seen[i])
                    last_seen[i] = samples[k].ts, sink += samples[k].sm;
    }
    return count;
}

/* Xid events: one event set with every GPU registered in it, waited on for
 * 500 ms at a time (the daemon's default `faults.event_wait`), on a thread of
 * its own. */
static void *events(void *arg) {
    (void)arg;
    unsigned n = 0, count = 0;
    set_t set;
    if (Count(&count) != 0 || SetCreate(&set) != 0) return NULL;
    for (unsigned i = 0; i < count; i++) {
        dev_t_ d;
        unsigned long long types = 0;
        if (Handle(i, &d) != 0 || SupportedEvents(d, &types) != 0) continue;
        if (Register(d, types, set) == 0) n++;
    }
    if (n == 0) return NULL;
    for (;;) {
        event_t e;
        if (Wait(set, &e, 500) == 0) sink += e.data;
    }
    return NULL;
}

/* ---------------------------------------------------------- kept files */

/* Open files keyed by (tid, kind), a linear-probing table; entries not read
 * in a sample are closed at the start of the next. */
enum { STAT, IO, SCHED, KIDS, TSTAT, CGROUP, LOADAVG };
typedef struct { uint64_t key; int fd; unsigned used; } slot_t;
static slot_t *slots;
static size_t nslots;
static unsigned sample_no;

static slot_t *slot(uint64_t key) {
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> 40 & (nslots - 1);
    if (!slots[i].key) return &slots[i];
    while (slots[i].key && slots[i].key != key)
        i = (i + 1) & (nslots - 1);
    return &slots[i];
}

static void sweep(void) {
    /* Rebuilds the table without the stale entries (deletion in a probing table). */
    slot_t *old = slots;
    slots = calloc(nslots, sizeof *slots);
    for (size_t i = 0; i < nslots; i++) {
        if (!old[i].key)
            continue;
        unsigned keep = (old[i].key & 7) == KIDS ? CHILDREN_QUIET + 1 : ((old[i].key & 7) == TSTAT || (old[i].key & 7) == SCHED) ? REFRESH + 1 : 1;
        if (old[i].used + keep < sample_no) {
            close(old[i].fd);
            continue;
        }
        *slot(old[i].key) = old[i];
    }
    free(old);
}

static char buf[1 << 16];
static int fresh; /* whether the last read_kept opened its file */

/* The whole file behind a kept descriptor; -1 when it cannot be read. */
static ssize_t read_kept(unsigned tid, int kind, const char *path) {
    slot_t *s = slot((uint64_t)tid << 3 | kind | 1ull << 63);
    if (s->key) {
        ssize_t n = pread(s->fd, buf, sizeof buf - 1, 0);
        if (n >= 0) {
            s->used = sample_no;
            buf[n] = 0;
            fresh = 0;
            return n;
        }
        close(s->fd);
        s->key = 0;
        sweep();
        s = slot((uint64_t)tid << 3 | kind | 1ull << 63);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n < 0) {
        close(fd);
        return -1;
    }
    buf[n] = 0;
    fresh = 1;
    *s = (slot_t){(uint64_t)tid << 3 | kind | 1ull << 63, fd, sample_no};
    return n;
}

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

/* ------------------------------------------------------------ parsing */

typedef struct { char state; unsigned ppid, threads; unsigned long long cpu, start, rss; } stat_t;

static int parse_stat(stat_t *st) {
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    st->state = *p;
    /* fields after the name, numbered as in proc(5): 3 state ... 24 rss */
    unsigned long long f[25] = {0};
    for (int i = 3; i <= 24 && *p; i++) {
        while (*p == ' ') p++;
        if (i > 3) f[i] = strtoull(p, &p, 10);
        else p++;
    }
    st->ppid = f[4], st->threads = f[20], st->cpu = f[14] + f[15], st->start = f[22], st->rss = f[24];
    return 0;
}

static unsigned long long field_after(const char *text, const char *name) {
    const char *p = strstr(text, name);
    return p ? strtoull(p + strlen(name), NULL, 10) : 0;
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

static unsigned nprocesses, nthreads;

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

static volatile sig_atomic_t stop, report;
static void on_stop(int s) { (void)s; stop = 1; }
static void on_report(int s) { (void)s; report = 1; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: floor LIBNVML [INTERVAL_MS]\n");
        return 2;
    }
    long interval_ms = argc > 2 ? atol(argv[2]) : 1000;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    nslots = 1 << 16;
    slots = calloc(nslots, sizeof *slots);
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    signal(SIGUSR1, on_report);
    load_nvml(argv[1]);
    pthread_t watcher;
    pthread_create(&watcher, NULL, events, NULL);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    unsigned gpus = 0;
    while (!stop) {
        sample_no++;
        if (sample_no % 8 == 0) sweep();
        gpus = read_gpus();
        nprocesses = nthreads = 0;
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
        if (report) {
            report = 0;
            printf("gpus=%u jobs=%u processes=%u threads=%u samples=%u\n", gpus, npids, nprocesses, nthreads, sample_no);
            fflush(stdout);
        }
        next.tv_nsec += interval_ms % 1000 * 1000000;
        next.tv_sec += interval_ms / 1000 + next.tv_nsec / 1000000000;
        next.tv_nsec %= 1000000000;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR && !stop && !report)
            ;
    }
    return (int)(sink & 0);
}
