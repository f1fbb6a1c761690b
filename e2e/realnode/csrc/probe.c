/* The test program of the real-node tier's image, dynamically linked on purpose (ld.so.preload
 * only reaches dynamic programs). It prints what a test asserts on, one "key=value" a line:
 *   probe=<argv[1] or "hello">   uid, pid, whether the host network is shared (hostname),
 *   every CUDA_* environment variable, and each mapped object whose path has "vgpu" in it.
 * Then it sleeps argv[3] seconds (default 0). Exit status: 0, or the number given as argv[2]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    printf("probe=%s\n", argc > 1 ? argv[1] : "hello");
    printf("uid=%d\npid=%d\nhostname=%s\n", (int)getuid(), (int)getpid(), host);
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "CUDA_", 5) == 0) {
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
    fflush(stdout);
    if (argc > 3) {
        sleep((unsigned int)atoi(argv[3]));
    }
    return argc > 2 ? atoi(argv[2]) : 0;
}
