/* LD_PRELOAD shim for durability.py's simulated host crash: after each
 * successful fsync/fdatasync of a regular file, appends "<size> <path>" to
 * the file DIAL_FSYNC_LOG names, where <size> is the file's size when the
 * call began: those bytes were on the disk when it returned. Truncating a
 * file to its last logged size is what a power cut at that instant leaves
 * (at worst: pages the kernel wrote back on its own would also survive). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void record(int fd, long long size) {
    const char *log = getenv("DIAL_FSYNC_LOG");
    char link[64], path[4096], line[4200];
    ssize_t n;
    int out, len;
    if (!log) return;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = 0;
    len = snprintf(line, sizeof line, "%lld %s\n", size, path);
    out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (out < 0) return;
    if (write(out, line, len) < 0) { /* nothing to do */ }
    close(out);
}

static int wrap(const char *name, int fd) {
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    int rc = real(fd);
    if (rc == 0 && regular) record(fd, (long long)st.st_size);
    return rc;
}

int fsync(int fd) { return wrap("fsync", fd); }
int fdatasync(int fd) { return wrap("fdatasync", fd); }
