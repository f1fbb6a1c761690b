/* Processes of different users in one container share one region, even where the region's
 * directory is sticky and world-writable (like /tmp) and fs.protected_regular is on: that
 * setting refuses an O_CREAT open of another user's file there, so libvgpu must open an
 * existing region without O_CREAT. Needs root (to run workers as nobody and as root, and to turn
 * fs.protected_regular on for the case; the old value is put back). TEST_TMP: a scratch dir
 * that nobody can reach (default /tmp). Run with LD_PRELOAD=libvgpu.so over the fake driver. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define PROTECTED_REGULAR "/proc/sys/fs/protected_regular"
#define NOBODY 65534

/* worker "hold" FD: allocate 100 MiB, say so on FD, wait to be killed.
 * worker "use": allocate 100 MiB; exit 0 when the region counts 200 MiB in use (ours + the
 * holder's). Exit 3: no context (libvgpu failed closed: the region did not open). */
static int worker(const char *mode, int fd)
{
	CUdeviceptr p = 0;
	size_t free_b = 0, total = 0;

	if (ctx_on(0) != 0)
		return 3;
	if (cuMemAlloc_v2(&p, 100 * MiB) != CUDA_SUCCESS)
		return 4;
	if (strcmp(mode, "hold") == 0) {
		if (write(fd, "x", 1) != 1)
			return 5;
		pause();
		return 0;
	}
	if (cuMemGetInfo_v2(&free_b, &total) != CUDA_SUCCESS)
		return 6;
	fprintf(stderr, "    in use: %zu MiB of %zu MiB\n", (total - free_b) >> 20, total >> 20);
	return total - free_b == 200 * MiB ? 0 : 7;
}

static pid_t start_worker(const char *mode, int fd, uid_t uid)
{
	char fd_text[16];
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	snprintf(fd_text, sizeof(fd_text), "%d", fd);
	if (uid != 0 && (setgid(uid) < 0 || setuid(uid) < 0))
		_exit(9);
	execl("/proc/self/exe", "test_region_users", "worker", mode, fd_text, (char *)NULL);
	_exit(10);
}

static int read_setting(char *value, size_t size)
{
	FILE *f = fopen(PROTECTED_REGULAR, "r");
	int ok = f != NULL && fgets(value, (int)size, f) != NULL;

	if (f)
		fclose(f);
	return ok ? 0 : -1;
}

static int write_setting(const char *value)
{
	FILE *f = fopen(PROTECTED_REGULAR, "w");
	int ok = f != NULL && fputs(value, f) >= 0;

	if (f && fclose(f) != 0)
		ok = 0;
	return ok ? 0 : -1;
}

static void users_share_a_region_in_a_sticky_dir_under_protected_regular(void)
{
	const char *tmp = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";
	char dir[512], path[600], saved[16] = "";
	int fds[2], st = 0;
	struct stat sb;
	pid_t holder, user;
	char c = 0;

	if (geteuid() != 0) {
		fprintf(stderr, "    needs root (make test runs as root)\n");
		CHECK(geteuid() == 0);
		return;
	}
	snprintf(dir, sizeof(dir), "%s/users.%d", tmp, (int)getpid());
	snprintf(path, sizeof(path), "%s/vgpu.cache", dir);
	CHECK(mkdir(dir, 01777) == 0 && chmod(dir, 01777) == 0); /* root's, sticky, like /tmp */
	CHECK(read_setting(saved, sizeof(saved)) == 0);
	CHECK(write_setting("1\n") == 0);
	setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", path, 1);
	CHECK(pipe(fds) == 0);

	holder = start_worker("hold", fds[1], NOBODY); /* creates the region: nobody owns it */
	close(fds[1]);
	CHECK_EQ(read(fds[0], &c, 1), 1);
	close(fds[0]);
	CHECK(stat(path, &sb) == 0);
	CHECK_EQ(sb.st_uid, NOBODY);
	CHECK_EQ(sb.st_mode & 0777, 0666);

	user = start_worker("use", -1, 0); /* root opens nobody's region in root's sticky dir */
	CHECK(waitpid(user, &st, 0) == user);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);

	kill(holder, SIGKILL);
	waitpid(holder, &st, 0);
	if (saved[0])
		CHECK(write_setting(saved) == 0);
	unlink(path);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(users_share_a_region_in_a_sticky_dir_under_protected_regular),
	};

	if (argc == 4 && strcmp(argv[1], "worker") == 0)
		return worker(argv[2], atoi(argv[3]));
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
