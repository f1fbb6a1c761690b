/* The test program of the real-node tier's image, dynamically linked on purpose (ld.so.preload
 * only reaches dynamic programs). It prints what a test asserts on, one "key=value" a line:
 *   probe=<argv[1] or "hello">   uid, pid, whether the host network is shared (hostname),
 *   every CUDA_* and NVIDIA_* environment variable (env.), each mapped object whose path has
 *   "vgpu" in it (mapped=), and what a GPU's CDI edits would have added: each mount point with
 *   "nvidia", "cuda" or "vgpu" in it (mount=) and each /dev entry named nvidia* (dev=).
 * Then it sleeps argv[3] seconds (default 0). Exit status: 0, or the number given as argv[2]. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int gpu_related(const char *text) {
    return strstr(text, "nvidia") != NULL || strstr(text, "cuda") != NULL ||
           strstr(text, "vgpu") != NULL;
}

/* mount points (field 5 of /proc/self/mountinfo) and /dev entries a GPU's edits would add */
static void print_gpu_files(void) {
    FILE *info = fopen("/proc/self/mountinfo", "r");
    char line[4096], point[4096];
    while (info != NULL && fgets(line, sizeof line, info) != NULL) {
        if (sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && gpu_related(point)) {
            printf("mount=%s\n", point);
        }
    }
    if (info != NULL) {
        fclose(info);
    }
    DIR *dev = opendir("/dev");
    for (struct dirent *entry; dev != NULL && (entry = readdir(dev)) != NULL;) {
        if (strncmp(entry->d_name, "nvidia", 6) == 0) {
            printf("dev=/dev/%s\n", entry->d_name);
        }
    }
    if (dev != NULL) {
        closedir(dev);
    }
}

int main(int argc, char **argv) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    printf("probe=%s\n", argc > 1 ? argv[1] : "hello");
    printf("uid=%d\npid=%d\nhostname=%s\n", (int)getuid(), (int)getpid(), host);
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "CUDA_", 5) == 0 || strncmp(*e, "NVIDIA_", 7) == 0) {
            printf("env.%s\n", *e);
        }
    }
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    char last[4096] = "";
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
        char *path = strchr(line, '/');
        if (path == NULL || strstr(path, "vgpu") == NULL || strcmp(path, last) == 0) {
            continue;
        }
        snprintf(last, sizeof last, "%s", path);
        printf("mapped=%s", path);
    }
    if (maps != NULL) {
        fclose(maps);
    }
    print_gpu_files();
    fflush(stdout);
    if (argc > 3) {
        sleep((unsigned int)atoi(argv[3]));
    }
    return argc > 2 ? atoi(argv[2]) : 0;
}
