/* Processes of one container share one limit through the shared region; kill -9 at any moment
 * neither deadlocks the others nor leaks a share. Run with CUDA_DEVICE_MEMORY_LIMIT=1Gi. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static int wait_status(pid_t pid)
{
	int st = 0;

	while (waitpid(pid, &st, 0) < 0)
		;
	return st;
}

static void processes_share_one_limit(void)
{
	CUdeviceptr p = 0;
	pid_t pid;
	int st;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	if ((pid = fork()) == 0) {
		CUdeviceptr q = 0;
		int bad = 0;
		bad |= (cuMemAlloc_v2(&q, 600 * MiB) != CUDA_ERROR_OUT_OF_MEMORY) << 0;
		bad |= (cuMemAlloc_v2(&q, 400 * MiB) != CUDA_SUCCESS) << 1;
		bad |= (free_mem() != 24 * MiB) << 2;
		exit(bad); /* exit, not _exit: the slot is handed back at exit */
	}
	st = wait_status(pid);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
	CHECK_EQ(free_mem(), GiB - 600 * MiB); /* the child's 400 MiB went with it */
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), GiB);
}

static void kill9_does_not_leak_a_share(void)
{
	CUdeviceptr p = 0;
	int fds[2];
	char c;
	pid_t pid;

	CHECK(ctx_on(0) == 0);
	CHECK(pipe(fds) == 0);
	if ((pid = fork()) == 0) {
		CUdeviceptr q = 0;
		if (cuMemAlloc_v2(&q, 800 * MiB) == CUDA_SUCCESS)
			CHECK(write(fds[1], "x", 1) == 1);
		pause();
		_exit(0);
	}
	CHECK(read(fds[0], &c, 1) == 1);
	CHECK_EQ(free_mem(), GiB - 800 * MiB); /* the neighbour's share is visible */
	kill(pid, SIGKILL);
	wait_status(pid);
	/* the dead process's 800 MiB is reclaimed when someone needs it */
	CHECK_EQ(cuMemAlloc_v2(&p, 900 * MiB), CUDA_SUCCESS);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), GiB);
	close(fds[0]);
	close(fds[1]);
}

/* A child hammers the shared lock; it is killed at random moments, 40 times. After each kill
 * the parent must get the whole limit within seconds (alarm = deadlock = failure). */
static void kill9_at_any_instruction_neither_deadlocks_nor_leaks(void)
{
	CUdeviceptr p = 0;
	unsigned int seed = 12345;

	CHECK(ctx_on(0) == 0);
	for (int round = 0; round < 40; round++) {
		pid_t pid = fork();
		if (pid == 0) {
			CUdeviceptr q[4];
			for (;;) {
				for (int i = 0; i < 4; i++)
					cuMemAlloc_v2(&q[i], 64 * MiB);
				free_mem();
				for (int i = 0; i < 4; i++)
					cuMemFree_v2(q[i]);
			}
		}
		struct timespec ts = {0, (long)(rand_r(&seed) % 3000) * 1000};
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		wait_status(pid);
		alarm(10);
		CHECK_EQ(cuMemAlloc_v2(&p, GiB), CUDA_SUCCESS);
		CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
		alarm(0);
	}
	CHECK_EQ(free_mem(), GiB);
}

/* 64 processes, half exiting normally, half killed while holding memory: afterwards the whole
 * limit is free again. */
static void many_short_lived_processes_leave_nothing_behind(void)
{
	pid_t pids[64];
	int fds[2];
	char c;

	CHECK(ctx_on(0) == 0);
	CHECK(pipe(fds) == 0);
	for (int i = 0; i < 64; i++) {
		if ((pids[i] = fork()) == 0) {
			CUdeviceptr q = 0;
			int ok = cuMemAlloc_v2(&q, 8 * MiB) == CUDA_SUCCESS;
			CHECK(write(fds[1], ok ? "y" : "n", 1) == 1);
			if (i % 2)
				exit(0);
			pause();
			_exit(0);
		}
	}
	int ok = 0;
	for (int i = 0; i < 64; i++)
		ok += read(fds[0], &c, 1) == 1 && c == 'y';
	CHECK_EQ(ok, 64);
	for (int i = 0; i < 64; i++) {
		if (i % 2 == 0)
			kill(pids[i], SIGKILL);
		wait_status(pids[i]);
	}
	CHECK_EQ(free_mem(), GiB);
	close(fds[0]);
	close(fds[1]);
}

/* A forked child inherits its parent's allocations but not their charges (memory.c's fork
 * handler): freeing one in the child is the driver's business and leaves the parent's charge. */
static void a_childs_free_of_its_parents_allocation_keeps_the_parents_charge(void)
{
	CUdeviceptr p = 0;
	pid_t pid;
	int st;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 600 * MiB), CUDA_SUCCESS);
	if ((pid = fork()) == 0) {
		int bad = 0;
		bad |= (cuMemFree_v2(p) != CUDA_SUCCESS) << 0;
		bad |= (free_mem() != GiB - 600 * MiB) << 1;
		exit(bad);
	}
	st = wait_status(pid);
	CHECK(WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
	CHECK_EQ(free_mem(), GiB - 600 * MiB);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_EQ(free_mem(), GiB);
}

/* An exec'd neighbour with a smaller limit (512m) while 900 MiB are in use: it sees free = 0,
 * never a wrapped-around huge number. */
static void child_sees_no_underflow(void)
{
	nvmlDevice_t d;
	nvmlMemory_t m;
	size_t f = 1, t = 0;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
	CHECK_EQ(t, 512 * MiB);
	CHECK_EQ(f, 0);
	nvmlInit_v2();
	nvmlDeviceGetHandleByIndex_v2(0, &d);
	CHECK_EQ(nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
	CHECK_EQ(m.free, 0);
	CHECK(m.used <= m.total);
}

static void usage_above_a_smaller_limit_never_underflows(void)
{
	CUdeviceptr p = 0;
	pid_t pid;
	int st;

	CHECK(ctx_on(0) == 0);
	CHECK_EQ(cuMemAlloc_v2(&p, 900 * MiB), CUDA_SUCCESS);
	if ((pid = fork()) == 0) {
		setenv("CUDA_DEVICE_MEMORY_LIMIT", "512m", 1);
		execl("/proc/self/exe", "test_region", "child_sees_no_underflow", (char *)NULL);
		_exit(127);
	}
	st = wait_status(pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(processes_share_one_limit),
		CASE(kill9_does_not_leak_a_share),
		CASE(kill9_at_any_instruction_neither_deadlocks_nor_leaks),
		CASE(many_short_lived_processes_leave_nothing_behind),
		CASE(usage_above_a_smaller_limit_never_underflows),
		CASE(a_childs_free_of_its_parents_allocation_keeps_the_parents_charge),
		CASE(child_sees_no_underflow),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
