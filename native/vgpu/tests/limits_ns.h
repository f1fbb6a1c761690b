/* For tests of the limits file at libvgpu's compiled-in path (VGPU_LIMITS_FILE), without touching
 * the machine's /etc: a private mount namespace whose /etc/vgpu-bridge is a tmpfs of the test's
 * own (when the machine has no such directory, an overlay of /etc with its upper layer in the
 * scratch dir makes one first). Needs root, as the other namespace tests do. And worker processes:
 * this program re-executed as "alloc BYTES" with an environment of its own, as a tenant would
 * start a child. */
#ifndef LIMITS_NS_H
#define LIMITS_NS_H

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "vgpu.h"

#define LIMITS_DIR "/etc/vgpu-bridge"

extern char **environ;

/* Enters a fresh namespace (this process and its future children); 0, or -1 with a message. */
static inline int limits_ns_enter(void)
{
	char upper[512], work[512], opts[1100], layers[400];

	snprintf(layers, sizeof(layers), "%s/etc-layers.XXXXXX",
		 getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp");
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		perror("    private mount namespace (needs root)");
		return -1;
	}
	if (access(LIMITS_DIR, F_OK) != 0) {
		snprintf(upper, sizeof(upper), "%s/upper", mkdtemp(layers) ? layers : "/nonexistent");
		snprintf(work, sizeof(work), "%s/work", layers);
		snprintf(opts, sizeof(opts), "lowerdir=/etc,upperdir=%s,workdir=%s", upper, work);
		if (mkdir(upper, 0755) < 0 || mkdir(work, 0755) < 0 ||
		    mount("overlay", "/etc", "overlay", 0, opts) < 0 || mkdir(LIMITS_DIR, 0755) < 0) {
			perror("    an overlay of /etc to make " LIMITS_DIR);
			return -1;
		}
	}
	if (mount("tmpfs", LIMITS_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0) {
		perror("    tmpfs on " LIMITS_DIR);
		return -1;
	}
	return 0;
}

/* Writes the limits file as the node agent would: root's, read-only. */
static inline int put_limits_file(const char *text)
{
	int fd = open(VGPU_LIMITS_FILE, O_WRONLY | O_CREAT | O_EXCL, 0444);
	ssize_t len = (ssize_t)strlen(text);

	if (fd < 0 || write(fd, text, (size_t)len) != len) {
		perror("    " VGPU_LIMITS_FILE);
		return -1;
	}
	return close(fd);
}

/* Exit codes of an "alloc" worker. */
enum { ALLOC_OK = 0, ALLOC_OUT_OF_MEMORY = 10, ALLOC_NOT_PERMITTED = 11, ALLOC_OTHER = 12 };

/* The worker: cuInit, a context on device 0, one allocation of `bytes` it keeps until exit. A
 * blocking read of the limits file would end it by SIGALRM. */
static inline int alloc_worker(const char *bytes)
{
	CUdeviceptr p;
	CUresult r;

	alarm(30);
	if ((r = cuInit(0)) == CUDA_SUCCESS && ctx_on(0) == 0)
		r = cuMemAlloc_v2(&p, strtoull(bytes, NULL, 10));
	fprintf(stderr, "    worker %d: allocating %s bytes: %d\n", (int)getpid(), bytes, (int)r);
	return r == CUDA_SUCCESS ? ALLOC_OK : r == CUDA_ERROR_OUT_OF_MEMORY ? ALLOC_OUT_OF_MEMORY
	       : r == CUDA_ERROR_NOT_PERMITTED ? ALLOC_NOT_PERMITTED : ALLOC_OTHER;
}

/* Runs this program as an "alloc" worker with environ plus `env` (KEY=VALUE entries replacing
 * any of the same key; NULL-terminated); its stderr goes to `err` if not NULL. Returns its exit
 * code, or -1 when it did not exit normally. */
static inline int run_alloc_worker(uint64_t bytes, const char *const *env, const char *err)
{
	char arg[32], *argv[] = {"worker", "alloc", arg, NULL}, *envp[512];
	int n = 0, st;
	pid_t pid;

	snprintf(arg, sizeof(arg), "%llu", (unsigned long long)bytes);
	for (char **e = environ; *e && n < 400; e++) {
		int replaced = 0;
		for (const char *const *o = env; o && *o; o++)
			replaced |= strncmp(*e, *o, strcspn(*o, "=") + 1) == 0;
		if (!replaced)
			envp[n++] = *e;
	}
	for (const char *const *o = env; o && *o; o++)
		envp[n++] = (char *)*o;
	envp[n] = NULL;
	if ((pid = fork()) == 0) {
		int fd = err ? open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
		if (fd >= 0)
			dup2(fd, 2);
		execve("/proc/self/exe", argv, envp);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Runs `fn` in a child process (so that libvgpu initialises afresh there); with `limits_text`
 * not NULL inside a fresh namespace, with that limits file unless it is "". The child's CHECK
 * failures fail the case. */
static inline void in_a_container(const char *limits_text, void (*fn)(void))
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (limits_text && (limits_ns_enter() < 0 ||
				    (*limits_text && put_limits_file(limits_text) < 0)))
			_exit(2);
		check_case_failed = 0;
		fn();
		_exit(check_case_failed ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

#endif
