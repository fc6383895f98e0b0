/*
 * reader.h: what the two readers in this folder (floor.c and mirror.c)
 * share beside NVML (nvml.h, included first): /proc files kept open and read
 * again from offset 0 with pread, the parsing of a `stat` line, and the
 * sampling loop with its SIGUSR1 report.
 *
 * The program defines, before including it, PROG (its name), and after it
 * `grace(kind)` (how many samples a kept file of that kind may go unread
 * before it is closed) and `sample()` (one sample's /proc reads, after the
 * NVML reads; it counts what it read in nprocesses and nthreads). Its main
 * calls run(argc, argv).
 */
#ifndef FLOOR_READER_H
#define FLOOR_READER_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static unsigned grace(int kind);
static void sample(void);

/* Open files keyed by (tid, kind), a linear-probing table. Every 8 samples
 * (and when a kept file can no longer be read) the table is rebuilt without
 * the entries not read for more than grace(kind) samples, their files
 * closed. */
enum { STAT, IO, SCHED, KIDS, TSTAT, CGROUP, LOADAVG, STATM }; /* 3 bits of the key */
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
        if (old[i].used + grace(old[i].key & 7) < sample_no) {
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

/* ---------------------------------------------------------------- the loop */

static unsigned nprocesses, nthreads;
static volatile sig_atomic_t stop, report;
static void on_stop(int s) { (void)s; stop = 1; }
static void on_report(int s) { (void)s; report = 1; }

/* `PROG LIBNVML [INTERVAL_MS]`: a sample every interval (NVML, then
 * sample()) until SIGTERM or SIGINT; after a sample in which SIGUSR1 came,
 * one line of what it read. */
static int run(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: " PROG " LIBNVML [INTERVAL_MS]\n");
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
        sample();
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

#endif
