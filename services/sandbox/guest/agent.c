/*
 * k3s-agent: the guest agent of k3stack microVM sandboxes.
 *
 * One process, one thread, one poll() loop over the virtio-serial port (/dev/vport0p1 by
 * default), the pipes of running commands and a SIGCHLD self-pipe. Built with gcc -static at
 * image build time (services/sandbox/images/builder.py); the busybox image has no libc.
 *
 * Protocol (both directions); the host side is services/sandbox/runtime/microvm/agent.py:
 *
 *   frame   = magic u32be 0x4B334147 ("K3AG") | type u8 | id u32be | len u32be | payload
 *   payload = TLV fields: tag u8 | len u32be | bytes       (except O/E/D: raw bytes)
 *
 *   host -> guest                         guest -> host (same id)
 *   H hello   t=token                     h t=token v=version p=agent pid
 *   P ping                                K
 *   X exec    a=argv.. e=K=V.. c=cwd      S p=pid, then O/E raw chunks, then Z x=exit [T=1]
 *             i=stdin t=timeout_ms b=1    (background: S only; output to /tmp/.k3s/bg-PID.*)
 *             o=max output bytes          [C=1]: output past o bytes per stream was dropped
 *   R read    f=path [n=limit]            D raw chunks (<= 1 MiB each).., then K s=size;
 *                                         F EFBIG once more than limit bytes were read
 *   W write   f=path m=mode(octal) d=data K E=entry
 *   W write   f=path m=mode z=1 (stream)  nothing yet (F at once if the file cannot be made)
 *   A append  raw chunk (same id as W)    nothing
 *   C commit  (same id as W) [x=1: abort] K E=entry, or F (the first error of the upload)
 *   L list    f=path                      K E=entry ...
 *   T stat    f=path                      K E=entry
 *   U remove  f=path [r=1]                K
 *   G kill    p=pid s=signal              K
 *   any failure                           F n=errno m=message
 *
 *   entry = "<mode octal> <size> <mtime sec.nsec> <d|f|l|o> <name>"
 *
 * Limits (guest side; the host enforces its own as well): in a VM (not with fd:N) the agent
 * mounts cgroup2 and runs every command in its own cgroup k3s-user/eN (killed whole at its
 * timeout; 64 pids and 32 MiB below its parent's bounds) under /sys/fs/cgroup/k3s-user (pids.max from k3s.pids_max=
 * on the kernel command line, default 1024; memory.max = RAM minus a reserve; cpu.weight 100)
 * while it sits in k3s-agent (cpu.weight 10000) with oom_score_adj -1000: a fork bomb or a
 * memory hog in a command cannot starve, OOM-kill or out-fork the agent.
 *
 * Surviving checkpoint/restore: the agent keeps no host connection state. When the host side
 * of the port goes away (read returns 0 / POLLHUP) it drops any half-read request and polls
 * the port every few ms until a host is back; output of commands whose host went away is
 * still framed and sent (the new host drops ids it does not know). A new host resynchronises
 * with H: everything before the matching h is discarded by the host.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x4B334147u
#define VERSION "2"
#define MAX_FRAME (1u << 30)
#define MAX_EXECS 256
#define CHUNK 65536
#define BG_DIR "/tmp/.k3s"
#define READ_CHUNK (1u << 20)
#define MAX_UPLOADS 16
#define CG "/sys/fs/cgroup"
#define CG_USER CG "/k3s-user"
#define CG_AGENT CG "/k3s-agent"

extern char **environ;

static int port = -1;
static int sigpipe_fds[2];

/* ------------------------------------------------------------------ output */

static void write_all(const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(port, p, len);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                struct pollfd pf = {port, POLLOUT, 0};
                poll(&pf, 1, 10);
                continue;
            }
            return; /* host gone for good; drop */
        }
        p += n;
        len -= (size_t)n;
    }
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}
static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void send_frame(char type, uint32_t id, const void *payload, size_t len) {
    unsigned char hdr[13];
    put32(hdr, MAGIC);
    hdr[4] = (unsigned char)type;
    put32(hdr + 5, id);
    put32(hdr + 9, (uint32_t)len);
    write_all(hdr, sizeof hdr);
    if (len) write_all(payload, len);
}

/* growable TLV buffer */
typedef struct { unsigned char *p; size_t n, cap; } buf_t;

static void buf_add(buf_t *b, const void *data, size_t len) {
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len) cap *= 2;
        b->p = realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
}
static void tlv(buf_t *b, char tag, const void *data, size_t len) {
    unsigned char h[5];
    h[0] = (unsigned char)tag;
    put32(h + 1, (uint32_t)len);
    buf_add(b, h, 5);
    buf_add(b, data, len);
}
static void tlv_str(buf_t *b, char tag, const char *s) { tlv(b, tag, s, strlen(s)); }
static void tlv_long(buf_t *b, char tag, long long v) {
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    tlv_str(b, tag, s);
}

static void send_buf(char type, uint32_t id, buf_t *b) {
    send_frame(type, id, b->p, b->n);
    free(b->p);
    b->p = NULL; b->n = b->cap = 0;
}

static void send_fail(uint32_t id, int err, const char *what, const char *path) {
    buf_t b = {0};
    char msg[4200];
    snprintf(msg, sizeof msg, "%s %s: %s", what, path ? path : "", strerror(err));
    tlv_long(&b, 'n', err);
    tlv_str(&b, 'm', msg);
    send_buf('F', id, &b);
}
static void send_ok(uint32_t id) { send_frame('K', id, NULL, 0); }

/* ------------------------------------------------------------------ request parsing */

typedef struct {
    char tag;
    uint32_t len;
    unsigned char *val; /* NUL-terminated copy boundary: we NUL the byte after (see below) */
} field_t;

#define MAX_FIELDS 4096
static field_t fields[MAX_FIELDS];
static int nfields;

/* Splits payload into fields; values are made NUL-terminated by shifting into a copy. */
static int parse_fields(unsigned char *payload, uint32_t len, unsigned char **owned) {
    /* copy with one spare byte per field so each value can be NUL-terminated */
    unsigned char *copy = malloc((size_t)len + MAX_FIELDS + 1);
    size_t off = 0, out = 0;
    nfields = 0;
    while (off + 5 <= len && nfields < MAX_FIELDS) {
        char tag = (char)payload[off];
        uint32_t flen = get32(payload + off + 1);
        off += 5;
        if (flen > len - off) { free(copy); return -1; }
        memcpy(copy + out, payload + off, flen);
        copy[out + flen] = 0;
        fields[nfields].tag = tag;
        fields[nfields].len = flen;
        fields[nfields].val = copy + out;
        nfields++;
        out += flen + 1;
        off += flen;
    }
    *owned = copy;
    return 0;
}

static field_t *field(char tag) {
    for (int i = 0; i < nfields; i++)
        if (fields[i].tag == tag) return &fields[i];
    return NULL;
}
static const char *field_str(char tag, const char *dflt) {
    field_t *f = field(tag);
    return f ? (const char *)f->val : dflt;
}

/* ------------------------------------------------------------------ files */

static void entry_text(buf_t *b, const char *path, const char *name) {
    struct stat st;
    char line[4400];
    if (lstat(path, &st) != 0) return;
    char kind = S_ISDIR(st.st_mode) ? 'd' : S_ISREG(st.st_mode) ? 'f' : S_ISLNK(st.st_mode) ? 'l' : 'o';
    int n = snprintf(line, sizeof line, "%o %lld %lld.%09ld %c %s", st.st_mode & 07777,
                     (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     kind, name);
    if (n > 0) tlv(b, 'E', line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return (s && s[1]) ? s + 1 : path;
}

static int mkdir_p(const char *dir) {
    char tmp[4096];
    size_t len = strlen(dir);
    if (len >= sizeof tmp) { errno = ENAMETOOLONG; return -1; }
    memcpy(tmp, dir, len + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

static void do_read(uint32_t id) {
    const char *path = field_str('f', "");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { send_fail(id, errno, "read", path); return; }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) { close(fd); send_fail(id, EISDIR, "read", path); return; }
    field_t *lim = field('n');
    if (lim) { /* streamed: chunks as they are read, never more than limit + 1 bytes */
        unsigned long long limit = strtoull((const char *)lim->val, NULL, 10), total = 0;
        if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > limit) {
            close(fd); send_fail(id, EFBIG, "read", path); return;
        }
        unsigned char *chunk = malloc(READ_CHUNK);
        size_t have = 0;
        for (;;) {
            ssize_t n = read(fd, chunk + have, READ_CHUNK - have);
            if (n < 0) { if (errno == EINTR) continue; int e = errno; close(fd); free(chunk); send_fail(id, e, "read", path); return; }
            have += (size_t)n;
            total += (unsigned long long)n;
            if (total > limit) { close(fd); free(chunk); send_fail(id, EFBIG, "read", path); return; }
            if (have == READ_CHUNK || (n == 0 && have)) { send_frame('D', id, chunk, have); have = 0; }
            if (n == 0) break;
        }
        close(fd);
        free(chunk);
        buf_t b = {0};
        tlv_long(&b, 's', (long long)total);
        send_buf('K', id, &b);
        return;
    }
    buf_t b = {0};
    char tmp[CHUNK];
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof tmp);
        if (n < 0) { if (errno == EINTR) continue; int e = errno; close(fd); free(b.p); send_fail(id, e, "read", path); return; }
        if (n == 0) break;
        buf_add(&b, tmp, (size_t)n);
        if (b.n > MAX_FRAME - CHUNK) { close(fd); free(b.p); send_fail(id, EFBIG, "read", path); return; }
    }
    close(fd);
    send_buf('D', id, &b);
}

static void upload_begin(uint32_t id);

static void do_write(uint32_t id) {
    if (field('z')) { upload_begin(id); return; }
    const char *path = field_str('f', "");
    field_t *d = field('d');
    mode_t mode = (mode_t)strtol(field_str('m', "644"), NULL, 8);
    char dir[4096], tmp[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) { *slash = 0; if (mkdir_p(dir) != 0) { send_fail(id, errno, "mkdir", dir); return; } }
    snprintf(tmp, sizeof tmp, "%s.k3s-tmp-%d", path, getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
    if (fd < 0) { send_fail(id, errno, "write", path); return; }
    size_t off = 0, len = d ? d->len : 0;
    while (off < len) {
        ssize_t n = write(fd, d->val + off, len - off);
        if (n < 0) { if (errno == EINTR) continue; int e = errno; close(fd); unlink(tmp); send_fail(id, e, "write", path); return; }
        off += (size_t)n;
    }
    fchmod(fd, mode & 07777);
    close(fd);
    if (rename(tmp, path) != 0) { int e = errno; unlink(tmp); send_fail(id, e, "write", path); return; }
    buf_t b = {0};
    entry_text(&b, path, base_name(path));
    send_buf('K', id, &b);
}

typedef struct {
    int used;
    uint32_t id;
    int fd;
    int err;
    mode_t mode;
    char path[4096], tmp[4200];
} upload_t;

static upload_t uploads[MAX_UPLOADS];

static upload_t *upload_of(uint32_t id) {
    for (int i = 0; i < MAX_UPLOADS; i++)
        if (uploads[i].used && uploads[i].id == id) return &uploads[i];
    return NULL;
}

static void upload_begin(uint32_t id) {
    const char *path = field_str('f', "");
    upload_t *u = NULL;
    for (int i = 0; i < MAX_UPLOADS; i++) if (!uploads[i].used) { u = &uploads[i]; break; }
    if (!u) { send_fail(id, EAGAIN, "write (too many uploads)", path); return; }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) { *slash = 0; if (mkdir_p(dir) != 0) { send_fail(id, errno, "mkdir", dir); return; } }
    memset(u, 0, sizeof *u);
    u->mode = (mode_t)strtol(field_str('m', "644"), NULL, 8) & 07777;
    snprintf(u->path, sizeof u->path, "%s", path);
    snprintf(u->tmp, sizeof u->tmp, "%s.k3s-tmp-%d-%u", path, getpid(), id);
    u->fd = open(u->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, u->mode);
    if (u->fd < 0) { send_fail(id, errno, "write", path); return; }
    u->used = 1;
    u->id = id;
}

static void upload_append(uint32_t id, const unsigned char *data, uint32_t len) {
    upload_t *u = upload_of(id);
    if (!u || u->err) return;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(u->fd, data + off, len - off);
        if (n < 0) { if (errno == EINTR) continue; u->err = errno; return; }
        off += (size_t)n;
    }
}

static void upload_commit(uint32_t id) {
    upload_t *u = upload_of(id);
    if (!u) return; /* its begin failed and was answered already */
    u->used = 0;
    if (field('x')) { /* the host gave up mid-upload: nothing appears */
        close(u->fd);
        unlink(u->tmp);
        send_fail(id, ECANCELED, "write (cancelled)", u->path);
        return;
    }
    if (!u->err) { fchmod(u->fd, u->mode); if (close(u->fd) != 0) u->err = errno; }
    else close(u->fd);
    if (!u->err && rename(u->tmp, u->path) != 0) u->err = errno;
    if (u->err) { unlink(u->tmp); send_fail(id, u->err, "write", u->path); return; }
    buf_t b = {0};
    entry_text(&b, u->path, base_name(u->path));
    send_buf('K', id, &b);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void do_list(uint32_t id) {
    const char *path = field_str('f', "/");
    DIR *dir = opendir(path);
    if (!dir) { send_fail(id, errno, "list", path); return; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n == cap) { cap = cap ? cap * 2 : 64; names = realloc(names, cap * sizeof *names); }
        names[n++] = strdup(de->d_name);
    }
    closedir(dir);
    qsort(names, n, sizeof *names, cmp_names);
    buf_t b = {0};
    char full[8192];
    for (size_t i = 0; i < n; i++) {
        snprintf(full, sizeof full, "%s/%s", strcmp(path, "/") ? path : "", names[i]);
        entry_text(&b, full, names[i]);
        free(names[i]);
    }
    free(names);
    send_buf('K', id, &b);
}

static void do_stat(uint32_t id) {
    const char *path = field_str('f', "/");
    struct stat st;
    if (lstat(path, &st) != 0) { send_fail(id, errno, "stat", path); return; }
    buf_t b = {0};
    entry_text(&b, path, base_name(path));
    send_buf('K', id, &b);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p) != 0 && errno != ENOENT ? -1 : 0;
}

static void do_remove(uint32_t id) {
    const char *path = field_str('f', "");
    int recursive = field('r') != NULL;
    struct stat st;
    if (lstat(path, &st) != 0) { send_fail(id, errno, "remove", path); return; }
    if (!strcmp(path, "/")) { send_fail(id, EBUSY, "remove", path); return; }
    int rc;
    if (S_ISDIR(st.st_mode) && recursive) rc = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
    else rc = remove(path);
    if (rc != 0) { send_fail(id, errno, "remove", path); return; }
    send_ok(id);
}

static void do_kill(uint32_t id) {
    pid_t pid = (pid_t)atol(field_str('p', "0"));
    int sig = atoi(field_str('s', "15"));
    if (pid <= 1) { send_fail(id, EPERM, "kill", field_str('p', "")); return; }
    /* the whole group first (execs run in their own session), then the process itself */
    int rc = kill(-pid, sig);
    if (rc != 0) rc = kill(pid, sig);
    if (rc != 0) { send_fail(id, errno, "kill", field_str('p', "")); return; }
    send_ok(id);
}

/* ------------------------------------------------------------------ exec */

typedef struct {
    int used;
    uint32_t id;
    pid_t pid;
    int out_fd, err_fd, in_fd;
    unsigned char *in_buf;
    size_t in_len, in_off;
    int64_t deadline_ms; /* 0 = none */
    int timed_out;
    int exited;
    int status;
    unsigned long long max_out, sent_out, sent_err;
    int truncated;
    char cgroup[64]; /* this command's cgroup under k3s-user ("" outside a VM) */
} exec_t;

static exec_t execs[MAX_EXECS];

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void build_env(char ***out) {
    static const char *base[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                 "HOME=/home/user", "USER=root", "LANG=C.UTF-8", "TERM=xterm", NULL};
    size_t n = 0, cap = 16 + (size_t)nfields;
    char **env = calloc(cap, sizeof *env);
    for (int i = 0; base[i]; i++) env[n++] = (char *)base[i];
    for (int i = 0; i < nfields; i++) {
        if (fields[i].tag != 'e') continue;
        char *kv = (char *)fields[i].val;
        char *eq = strchr(kv, '=');
        if (!eq) continue;
        size_t klen = (size_t)(eq - kv) + 1;
        size_t j;
        for (j = 0; j < n; j++)
            if (!strncmp(env[j], kv, klen)) break;
        env[j] = kv;
        if (j == n) n++;
    }
    env[n] = NULL;
    *out = env;
}

static int in_vm = 0;
static unsigned long cgroup_seq = 0;

static long long cmd_pids_max = 0, cmd_mem_max = 0; /* one command's share (set at start) */

static void put_file(const char *path, const char *value);

/* A fresh cgroup for one command (its processes and all they fork): killing it on timeout
 * ends a fork bomb as a whole, which signalling a process group cannot; its own pids.max and
 * memory.max, a reserve below k3s-user's, leave the next command room to run. */
static void new_exec_cgroup(char *out, size_t len) {
    out[0] = 0;
    if (!in_vm) return;
    snprintf(out, len, CG_USER "/e%lu", ++cgroup_seq);
    if (mkdir(out, 0755) != 0 && errno != EEXIST) { out[0] = 0; return; }
    char p[128], v[32];
    if (cmd_pids_max > 0) {
        snprintf(p, sizeof p, "%s/pids.max", out);
        snprintf(v, sizeof v, "%lld", cmd_pids_max);
        put_file(p, v);
    }
    if (cmd_mem_max > 0) {
        snprintf(p, sizeof p, "%s/memory.max", out);
        snprintf(v, sizeof v, "%lld", cmd_mem_max);
        put_file(p, v);
    }
}

static void join_cgroup(const char *cg) {
    if (!in_vm) return;
    char p[128];
    snprintf(p, sizeof p, "%s/cgroup.procs", cg[0] ? cg : CG_USER);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) { if (write(fd, "0", 1) < 0) { /* limits unavailable: run anyway */ } close(fd); }
    fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) { if (write(fd, "0", 1) < 0) { /* ignored */ } close(fd); }
}

static void kill_cgroup(const char *cg) {
    if (!cg[0]) return;
    char p[128];
    snprintf(p, sizeof p, "%s/cgroup.kill", cg);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) { if (write(fd, "1", 1) < 0) { /* kernel without cgroup.kill */ } close(fd); }
}

static void put_file(const char *path, const char *value) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, value, strlen(value)) < 0) { /* controller missing: that limit is off */ }
    close(fd);
}

static long long cmdline_value(const char *key, long long dflt) {
    char buf[4096];
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dflt;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return dflt;
    buf[n] = 0;
    char *p = strstr(buf, key);
    return p ? atoll(p + strlen(key)) : dflt;
}

/* Commands in k3s-user (bounded pids and memory, low CPU weight), the agent in k3s-agent. */
static void setup_limits(void) {
    mkdir(CG, 0755);
    if (access(CG "/cgroup.controllers", F_OK) != 0 && mount("cgroup2", CG, "cgroup2", 0, NULL) != 0) return;
    put_file(CG "/cgroup.subtree_control", "+pids +memory +cpu");
    mkdir(CG_USER, 0755);
    mkdir(CG_AGENT, 0755);
    char v[64];
    long long pids = cmdline_value("k3s.pids_max=", 1024);
    snprintf(v, sizeof v, "%lld", pids);
    put_file(CG_USER "/pids.max", v);
    put_file(CG_USER "/cgroup.subtree_control", "+pids +memory +cpu");
    cmd_pids_max = pids > 128 ? pids - 64 : pids / 2;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    long long total = (long long)pages * psz, reserve = total / 8 > (48ll << 20) ? total / 8 : (48ll << 20);
    if (total > 2 * reserve) {
        snprintf(v, sizeof v, "%lld", total - reserve);
        put_file(CG_USER "/memory.max", v);
        cmd_mem_max = total - reserve - (32ll << 20); /* the next command's 32 MiB */
    }
    put_file(CG_USER "/cpu.weight", "100");
    put_file(CG_AGENT "/cpu.weight", "10000");
    snprintf(v, sizeof v, "%d", getpid());
    put_file(CG_AGENT "/cgroup.procs", v);
    put_file("/proc/self/oom_score_adj", "-1000");
}

static void do_exec(uint32_t id) {
    int background = field('b') != NULL;
    int nargs = 0;
    for (int i = 0; i < nfields; i++) nargs += fields[i].tag == 'a';
    if (nargs == 0) { send_fail(id, EINVAL, "exec", "(empty argv)"); return; }
    int slot = -1;
    if (!background) {
        for (int i = 0; i < MAX_EXECS; i++) if (!execs[i].used) { slot = i; break; }
        if (slot < 0) { send_fail(id, EAGAIN, "exec", "(too many running commands)"); return; }
    }
    char **argv = calloc((size_t)nargs + 1, sizeof *argv);
    for (int i = 0, k = 0; i < nfields; i++) if (fields[i].tag == 'a') argv[k++] = (char *)fields[i].val;
    char **env;
    build_env(&env);
    const char *cwd = field_str('c', "/home/user");
    field_t *in = field('i');
    int pout[2] = {-1, -1}, perr[2] = {-1, -1}, pin[2] = {-1, -1};
    if (!background) {
        if (pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC)) { send_fail(id, errno, "pipe", ""); goto out; }
    }
    if (in && in->len && pipe2(pin, O_CLOEXEC)) { send_fail(id, errno, "pipe", ""); goto out; }
    char cg[64];
    new_exec_cgroup(cg, sizeof cg);
    pid_t pid = fork();
    if (pid < 0) { send_fail(id, errno, "fork", argv[0]); if (cg[0]) rmdir(cg); goto out; }
    if (pid == 0) {
        join_cgroup(cg);
        setsid();
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        int nul = open("/dev/null", O_RDWR);
        dup2(pin[0] >= 0 ? pin[0] : nul, 0);
        if (background) {
            char p[64];
            mkdir_p(BG_DIR);
            snprintf(p, sizeof p, BG_DIR "/bg-%d.out", getpid());
            int o = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            snprintf(p, sizeof p, BG_DIR "/bg-%d.err", getpid());
            int e = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(o >= 0 ? o : nul, 1);
            dup2(e >= 0 ? e : nul, 2);
        } else {
            dup2(pout[1], 1);
            dup2(perr[1], 2);
        }
        if (chdir(cwd) != 0) {
            dprintf(2, "k3s-agent: cwd %s: %s\n", cwd, strerror(errno));
            _exit(127);
        }
        environ = env;
        execvp(argv[0], argv);
        dprintf(2, "k3s-agent: %s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    buf_t b = {0};
    tlv_long(&b, 'p', pid);
    send_buf('S', id, &b);
    if (background) {
        if (pin[1] >= 0) { /* small stdin for background commands: best effort, then close */
            set_nonblock(pin[1]);
            if (write(pin[1], in->val, in->len) < 0) { /* ignored */ }
        }
        goto out;
    }
    exec_t *e = &execs[slot];
    memset(e, 0, sizeof *e);
    snprintf(e->cgroup, sizeof e->cgroup, "%s", cg);
    e->used = 1;
    e->id = id;
    e->pid = pid;
    close(pout[1]); pout[1] = -1;
    close(perr[1]); perr[1] = -1;
    e->out_fd = pout[0]; pout[0] = -1;
    e->err_fd = perr[0]; perr[0] = -1;
    set_nonblock(e->out_fd);
    set_nonblock(e->err_fd);
    e->in_fd = -1;
    if (pin[1] >= 0) {
        e->in_fd = pin[1]; pin[1] = -1;
        set_nonblock(e->in_fd);
        e->in_buf = malloc(in->len);
        memcpy(e->in_buf, in->val, in->len);
        e->in_len = in->len;
    }
    long long t = atoll(field_str('t', "0"));
    e->deadline_ms = t > 0 ? now_ms() + t : 0;
    e->max_out = strtoull(field_str('o', "0"), NULL, 10);
out:
    for (int i = 0; i < 2; i++) {
        if (pout[i] >= 0) close(pout[i]);
        if (perr[i] >= 0) close(perr[i]);
        if (pin[i] >= 0) close(pin[i]);
    }
    free(argv);
    free(env);
}

static int drain(exec_t *e, int fd, char kind) {
    char tmp[CHUNK];
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof tmp);
        if (n > 0) {
            unsigned long long *sent = kind == 'O' ? &e->sent_out : &e->sent_err;
            size_t keep = (size_t)n;
            if (e->max_out && *sent + keep > e->max_out) { keep = (size_t)(e->max_out - *sent); e->truncated = 1; }
            if (keep) send_frame(kind, e->id, tmp, keep);
            *sent += keep;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n == 0 ? 0 : 1; /* 0 = EOF, 1 = would block */
    }
}

static void finish(exec_t *e) {
    if (e->out_fd >= 0) { drain(e, e->out_fd, 'O'); close(e->out_fd); }
    if (e->err_fd >= 0) { drain(e, e->err_fd, 'E'); close(e->err_fd); }
    if (e->in_fd >= 0) close(e->in_fd);
    free(e->in_buf);
    int code = WIFEXITED(e->status) ? WEXITSTATUS(e->status)
             : WIFSIGNALED(e->status) ? 128 + WTERMSIG(e->status) : -1;
    buf_t b = {0};
    tlv_long(&b, 'x', code);
    if (e->timed_out) tlv_str(&b, 'T', "1");
    if (e->truncated) tlv_str(&b, 'C', "1");
    send_buf('Z', e->id, &b);
    if (e->cgroup[0]) rmdir(e->cgroup); /* fails while background children live on: kept */
    e->used = 0;
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < MAX_EXECS; i++) {
            if (execs[i].used && execs[i].pid == pid) {
                execs[i].exited = 1;
                execs[i].status = status;
                finish(&execs[i]);
                break;
            }
        }
    }
}

/* ------------------------------------------------------------------ main loop */

static void on_sigchld(int sig) {
    (void)sig;
    int saved = errno;
    if (write(sigpipe_fds[1], "c", 1) < 0) { /* pipe full: a wakeup is pending anyway */ }
    errno = saved;
}

static void handle(char type, uint32_t id, unsigned char *payload, uint32_t len) {
    if (type == 'A') { upload_append(id, payload, len); return; } /* raw, no TLV parse */
    unsigned char *owned = NULL;
    if (parse_fields(payload, len, &owned) != 0) { send_fail(id, EPROTO, "parse", ""); return; }
    switch (type) {
    case 'H': {
        buf_t b = {0};
        field_t *t = field('t');
        tlv(&b, 't', t ? t->val : (unsigned char *)"", t ? t->len : 0);
        tlv_str(&b, 'v', VERSION);
        tlv_long(&b, 'p', getpid());
        send_buf('h', id, &b);
        break;
    }
    case 'P': send_ok(id); break;
    case 'X': do_exec(id); break;
    case 'R': do_read(id); break;
    case 'W': do_write(id); break;
    case 'L': do_list(id); break;
    case 'T': do_stat(id); break;
    case 'U': do_remove(id); break;
    case 'G': do_kill(id); break;
    case 'C': upload_commit(id); break;
    default: send_fail(id, ENOSYS, "unknown request", "");
    }
    free(owned);
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "/dev/vport0p1";
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGPIPE, SIG_IGN);
    mkdir_p("/home/user");
    mkdir_p(BG_DIR);
    if (pipe2(sigpipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigchld;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    if (!strncmp(dev, "fd:", 3)) port = atoi(dev + 3); /* tests: an inherited socket */
    else {
        in_vm = 1;
        setup_limits();
        while ((port = open(dev, O_RDWR | O_CLOEXEC)) < 0) usleep(20000);
    }

    unsigned char *in = malloc(CHUNK);
    size_t in_len = 0, in_cap = CHUNK;
    int connected = 1;
    struct pollfd pfd[2 + 3 * MAX_EXECS];
    exec_t *owner[2 + 3 * MAX_EXECS];
    char role[2 + 3 * MAX_EXECS];

    for (;;) {
        int n = 0;
        pfd[n].fd = sigpipe_fds[0]; pfd[n].events = POLLIN; owner[n] = NULL; role[n++] = 's';
        if (connected) { pfd[n].fd = port; pfd[n].events = POLLIN; owner[n] = NULL; role[n++] = 'p'; }
        int64_t now = now_ms(), timeout = connected ? -1 : 5;
        for (int i = 0; i < MAX_EXECS; i++) {
            exec_t *e = &execs[i];
            if (!e->used) continue;
            if (e->out_fd >= 0) { pfd[n].fd = e->out_fd; pfd[n].events = POLLIN; owner[n] = e; role[n++] = 'O'; }
            if (e->err_fd >= 0) { pfd[n].fd = e->err_fd; pfd[n].events = POLLIN; owner[n] = e; role[n++] = 'E'; }
            if (e->in_fd >= 0) { pfd[n].fd = e->in_fd; pfd[n].events = POLLOUT; owner[n] = e; role[n++] = 'I'; }
            if (e->deadline_ms && !e->timed_out) {
                int64_t left = e->deadline_ms - now;
                if (left <= 0) {
                    e->timed_out = 1;
                    kill_cgroup(e->cgroup);
                    kill(-e->pid, SIGKILL);
                    kill(e->pid, SIGKILL);
                } else if (timeout < 0 || left < timeout) timeout = left;
            }
        }
        int rc = poll(pfd, (nfds_t)n, (int)timeout);
        if (rc < 0 && errno != EINTR) usleep(1000);
        if (!connected) {
            struct pollfd pp = {port, POLLIN, 0};
            if (poll(&pp, 1, 0) >= 0 && !(pp.revents & POLLHUP)) connected = 1;
        }
        for (int i = 0; rc > 0 && i < n; i++) {
            if (!pfd[i].revents) continue;
            exec_t *e = owner[i];
            switch (role[i]) {
            case 's': {
                char tmp[64];
                while (read(sigpipe_fds[0], tmp, sizeof tmp) > 0) {}
                break;
            }
            case 'p': {
                if (!(pfd[i].revents & POLLIN)) { connected = 0; in_len = 0; break; }
                if (in_cap - in_len < CHUNK) { in_cap *= 2; in = realloc(in, in_cap); }
                ssize_t got = read(port, in + in_len, in_cap - in_len);
                if (got <= 0) { if (got == 0) { connected = 0; in_len = 0; } break; }
                in_len += (size_t)got;
                for (;;) { /* handle every complete frame */
                    size_t start = 0;
                    while (start + 4 <= in_len && get32(in + start) != MAGIC) start++;
                    if (start) { memmove(in, in + start, in_len - start); in_len -= start; }
                    if (in_len < 13) break;
                    uint32_t flen = get32(in + 9);
                    if (flen > MAX_FRAME) { in_len = 0; break; }
                    if (in_len < 13 + (size_t)flen) {
                        if (in_cap < 13 + (size_t)flen) { in_cap = 13 + (size_t)flen; in = realloc(in, in_cap); }
                        break;
                    }
                    handle((char)in[4], get32(in + 5), in + 13, flen);
                    memmove(in, in + 13 + flen, in_len - 13 - flen);
                    in_len -= 13 + flen;
                }
                break;
            }
            case 'O':
            case 'E': {
                int *fd = role[i] == 'O' ? &e->out_fd : &e->err_fd;
                if (*fd >= 0 && drain(e, *fd, role[i]) == 0) { close(*fd); *fd = -1; }
                break;
            }
            case 'I': {
                ssize_t w = write(e->in_fd, e->in_buf + e->in_off, e->in_len - e->in_off);
                if (w > 0) e->in_off += (size_t)w;
                if ((w < 0 && errno != EAGAIN && errno != EINTR) || e->in_off >= e->in_len) {
                    close(e->in_fd);
                    e->in_fd = -1;
                }
                break;
            }
            }
        }
        reap();
    }
}
