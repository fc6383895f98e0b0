/*
 * nvml.h: the NVML side of the two readers in this folder (floor.c and
 * mirror.c), the same calls in both: every GPU's values each sample, as
 * stallwatch makes them (the same symbols, the same count-then-fill protocol
 * for the process lists, the MIG mode query, the fault state's field values
 * in one call, the processes' utilization samples), the pids of the GPU
 * processes in `pids`, and, on a thread of its own, the wait on one Xid
 * event set holding every GPU, as the daemon's events thread does.
 *
 * Included once, by the program, after it defines PROG (its name, for
 * messages). Everything here is static: a header for two single-file
 * programs, not a library.
 */
#ifndef FLOOR_NVML_H
#define FLOOR_NVML_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int ret_t;
typedef void *dev_t_;
#define INSUFFICIENT_SIZE 7

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
        fprintf(stderr, PROG ": the NVML library lacks %s\n", name);
        exit(2);
    }
    return f;
}

static void load_nvml(const char *path) {
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        fprintf(stderr, PROG ": cannot load %s: %s\n", path, dlerror());
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
        fprintf(stderr, PROG ": NVML did not initialise\n");
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

#endif
