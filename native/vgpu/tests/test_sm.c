/* SM shares over the fake driver: a launch loop that would keep the device 100% busy is held to
 * CUDA_DEVICE_SM_LIMIT, measured on the fake device's own busy time (not on what libvgpu thinks).
 * A busy machine only ever lowers what a throttled loop achieves (its launches and the watcher
 * run late), so the assertions are what holds on any machine: never more than the share plus a
 * margin (TEST_TOLERANCE, default 5 points), still running (above TEST_MIN_UTIL, default a
 * quarter of the share), and, side by side under the same load, a smaller share gets less than
 * a larger one and a limited worker less than an unlimited one. How close to the share it lands
 * on a quiet machine is a benchmark (`make -C native/vgpu bench`), not a test.
 * TEST_EXPECT_UTIL = the share in percent (100: unthrottled); TEST_LAUNCH = kernel|ptsz|ex|coop|graph. */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "common.h"
#include "region.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double env_or(const char *name, double dflt)
{
	const char *v = getenv(name);
	return v && *v ? atof(v) : dflt;
}

/* Busy percent of the fake device over [warmup, warmup + measure) s of a loop of `kind` launches. */
static double launch_loop_util(const char *kind, double warmup, double measure, uint64_t *launches)
{
	double t0, t1 = 0;
	uint64_t busy0 = 0, busy1;
	launch_ptsz_fn ptsz = NULL;
	int measuring = 0;

	*launches = 0;
	CHECK(ctx_on(0) == 0);
	cuGetProcAddress("cuLaunchKernel", (void **)&ptsz, 12000,
			 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	CHECK(ptsz != NULL);
	t0 = now_s();
	for (;;) {
		double t = now_s() - t0;
		if (!measuring && t >= warmup) {
			busy0 = fake_cuda_busy_total_ns(0);
			t1 = now_s();
			measuring = 1;
		}
		if (t >= warmup + measure)
			break;
		CHECK_EQ(launch_kind(kind, ptsz), CUDA_SUCCESS);
		(*launches)++;
	}
	busy1 = fake_cuda_busy_total_ns(0);
	double util = (double)(busy1 - busy0) / 1e9 / (now_s() - t1) * 100;
	cuCtxSynchronize();
	return util;
}

/* Held to the share (never more than it + TEST_TOLERANCE) and still running; unthrottled
 * (TEST_EXPECT_UTIL=100): the device kept busy. */
static void check_held_to(double util, double share)
{
	double tol = env_or("TEST_TOLERANCE", 5), min = env_or("TEST_MIN_UTIL", share / 4);

	if (share >= 100) {
		CHECK(util >= 100 - env_or("TEST_TOLERANCE", 10));
		return;
	}
	CHECK(util <= share + tol);
	CHECK(util >= min);
}

static void device_utilisation_follows_the_limit(void)
{
	const char *kind = getenv("TEST_LAUNCH") ? getenv("TEST_LAUNCH") : "kernel";
	double share = env_or("TEST_EXPECT_UTIL", 100), util;
	uint64_t n;

	util = launch_loop_util(kind, env_or("TEST_WARMUP_S", 1), env_or("TEST_MEASURE_S", 2), &n);
	fprintf(stderr, "    %s: %llu launches, device busy %.1f%% (share %.0f%%)\n", kind,
		(unsigned long long)n, util, share);
	printf("# util %s %.1f\n", kind, util);
	check_held_to(util, share);
}

/* Containers side by side, one process each with its own fake device and region, limited to
 * 25, 50 and 75% and unlimited: whatever the machine's load, all of them see it alike. */
static void smaller_shares_get_less_side_by_side(void)
{
	static const unsigned int limits[] = {25, 50, 75, 0};
	const char *region = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
	double util[4] = {0};
	int fd[4][2];
	pid_t pid[4];

	CHECK(region != NULL);
	for (int i = 0; i < 4; i++) {
		CHECK(pipe(fd[i]) == 0);
		if ((pid[i] = fork()) == 0) {
			char path[4200], lim[16];
			uint64_t n;
			snprintf(path, sizeof(path), "%s.%d", region ? region : "/tmp/vgpu-sm", i);
			snprintf(lim, sizeof(lim), "%u", limits[i]);
			setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", path, 1);
			setenv("CUDA_DEVICE_SM_LIMIT", lim, 1);
			if (limits[i] == 0) /* unthrottled: a real queue's depth, as below */
				setenv("FAKE_CUDA_QUEUE", "1024", 1);
			double u = launch_loop_util("kernel", 1, 2, &n);
			_exit(write(fd[i][1], &u, sizeof(u)) == sizeof(u) && !check_case_failed ? 0 : 1);
		}
		close(fd[i][1]);
	}
	for (int i = 0; i < 4; i++) {
		int st;
		CHECK(read(fd[i][0], &util[i], sizeof(util[i])) == sizeof(util[i]));
		CHECK(waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		close(fd[i][0]);
	}
	fprintf(stderr, "    side by side: 25%% %.1f, 50%% %.1f, 75%% %.1f, unlimited %.1f\n", util[0],
		util[1], util[2], util[3]);
	printf("# util side by side %.1f %.1f %.1f %.1f\n", util[0], util[1], util[2], util[3]);
	for (int i = 0; i < 3; i++)
		check_held_to(util[i], limits[i]);
	check_held_to(util[3], 100);
	CHECK(util[0] < util[1] && util[1] < util[2] && util[2] < util[3]);
	CHECK(util[0] < util[2] / 2); /* 25 vs 75: clearly less, not just less */
}

/* Two processes of the container on one (FAKE_GPU_STATE-shared) device: together they get the
 * limit, not the limit each. */
static void processes_share_one_sm_limit(void)
{
	double expect = atof(getenv("TEST_EXPECT_UTIL") ? getenv("TEST_EXPECT_UTIL") : "100");
	double t0, t1;
	uint64_t busy0, busy1, mine0, mine1;
	pid_t pid;
	int st;

	CHECK(getenv("FAKE_GPU_STATE") != NULL);
	CHECK(ctx_on(0) == 0);
	t0 = now_s();
	if ((pid = fork()) == 0) {
		while (now_s() - t0 < 3.3)
			cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
		cuCtxSynchronize();
		exit(0);
	}
	while (now_s() - t0 < 1.0)
		cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	busy0 = fake_cuda_busy_total_ns(0);
	mine0 = fake_cuda_busy_ns_pid(0, 1000000000ULL, fake_host_pid());
	t1 = now_s();
	while (now_s() - t0 < 3.0)
		cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	busy1 = fake_cuda_busy_total_ns(0);
	mine1 = fake_cuda_busy_ns_pid(0, 1000000000ULL, fake_host_pid());
	double util = (double)(busy1 - busy0) / 1e9 / (now_s() - t1) * 100;
	fprintf(stderr, "    two processes: device busy %.1f%% (share %.0f%%); parent's share of "
			"the last second %.1f%% then %.1f%%\n",
		util, expect, mine0 / 1e7, mine1 / 1e7);
	check_held_to(util, expect); /* one share for both, not one each */
	CHECK(mine1 > 0 && mine1 < busy1 - busy0); /* both processes ran */
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

/* Another container's process on the shared (FAKE_GPU_STATE) device, without libvgpu: kernels
 * paced to keep the device TEST_NEIGHBOUR_UTIL percent busy for TEST_NEIGHBOUR_S seconds. */
static void neighbour_keeps_the_device_busy(void)
{
	double util = env_or("TEST_NEIGHBOUR_UTIL", 40), seconds = env_or("TEST_NEIGHBOUR_S", 8);
	double period = env_or("FAKE_CUDA_KERNEL_US", 500) / 1e6 / (util / 100), t0, t;
	uint64_t k = 0;

	CHECK(getenv("FAKE_GPU_STATE") != NULL);
	CHECK(ctx_on(0) == 0);
	t0 = now_s();
	while ((t = now_s() - t0) < seconds) {
		if (t < (double)k * period) {
			sleep_s((double)k * period - t);
			continue;
		}
		CHECK_EQ(cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL),
			 CUDA_SUCCESS);
		k++;
	}
	cuCtxSynchronize();
}

/* Field 22 of <proc>/<pid>/stat; 0 if unreadable. */
static uint64_t start_time_in(const char *proc, const char *pid)
{
	char path[512], buf[1024], *p;
	unsigned long long start = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s/stat", proc, pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL)
		return 0;
	for (int field = 3; field <= 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p && sscanf(p + 1, "%llu", &start) == 1 ? start : 0;
}

/* The last NSpid entry of <proc>/<pid>/status (the pid in its innermost namespace); 0 if none. */
static long innermost_pid_in(const char *proc, const char *pid)
{
	char path[512], line[256], *p, *end;
	long last = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/status", proc, pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "NSpid:", 6) == 0)
			for (p = line + 6;; p = end) {
				long v = strtol(p, &end, 10);
				if (end == p)
					break;
				last = v;
			}
	fclose(f);
	return last;
}

/* What the node agent does for a region on the host: finds the owner of each live slot without a
 * host pid among the host's processes (same start time, innermost pid = slot pid) and writes
 * <region dir>/host-pids atomically. The host's /proc is FAKE_HOST_PROC; TEST_HOST_PIDS_HEADER
 * replaces the first line (another version). Returns the lines of pids written. */
static int write_host_pids_as_the_agent_would(void)
{
	const char *host_proc = getenv("FAKE_HOST_PROC"), *path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
	char file[4200], temp[4300], text[4096];
	const struct vgpu_region *r;
	struct dirent *e;
	int fd, len, lines = 0;
	DIR *dir;

	if (host_proc == NULL || path == NULL || (fd = open(path, O_RDONLY)) < 0)
		return -1;
	r = mmap(NULL, sizeof(*r), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (r == MAP_FAILED || (dir = opendir(host_proc)) == NULL)
		return -1;
	len = snprintf(text, sizeof(text), "%s\n",
		       getenv("TEST_HOST_PIDS_HEADER") ? getenv("TEST_HOST_PIDS_HEADER")
						       : VGPU_HOST_PIDS_HEADER);
	for (uint32_t i = 0; i < r->high_water && i < VGPU_REGION_SLOTS; i++) {
		const struct vgpu_region_slot *s = &r->slots[i];
		if (s->pid == 0 || s->host_pid != 0)
			continue;
		rewinddir(dir);
		while ((e = readdir(dir)) != NULL) {
			if (!isdigit((unsigned char)e->d_name[0]) ||
			    start_time_in(host_proc, e->d_name) != s->start_time ||
			    innermost_pid_in(host_proc, e->d_name) != s->pid)
				continue;
			len += snprintf(text + len, sizeof(text) - (size_t)len, "%d %llu %s\n", s->pid,
					(unsigned long long)s->start_time, e->d_name);
			lines++;
			break;
		}
	}
	closedir(dir);
	munmap((void *)r, sizeof(*r));
	snprintf(file, sizeof(file), "%.*s%s", (int)(strrchr(path, '/') + 1 - path), path,
		 VGPU_HOST_PIDS_FILE);
	snprintf(temp, sizeof(temp), "%s.tmp", file);
	if ((fd = open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
		return -1;
	if (write(fd, text, (size_t)len) != len || close(fd) < 0 || rename(temp, file) < 0)
		return -1;
	fprintf(stderr, "    wrote %s:\n%s", file, text);
	return lines;
}

/* A throttled process whose host pid libvgpu does not know (a pid namespace with its own /proc,
 * as in a pod) beside a neighbour that keeps the shared device busy: its own busy share (by host
 * pid) must be TEST_EXPECT_UTIL. TEST_HOST_PIDS_FILE=1: after 0.5 s it writes the agent's
 * host-pids file, as the node agent would. */
static void measured_beside_a_neighbour(void)
{
	double expect = env_or("TEST_EXPECT_UTIL", 50);
	double warmup = env_or("TEST_WARMUP_S", 3), end = warmup + env_or("TEST_MEASURE_S", 3);
	double neighbour = env_or("TEST_NEIGHBOUR_UTIL", 40), t0, t1 = 0, span, mine, others;
	int write_file = getenv("TEST_HOST_PIDS_FILE") != NULL, written = 0, measuring = 0;
	uint64_t busy0 = 0, busy1;

	CHECK(getenv("FAKE_GPU_STATE") != NULL);
	CHECK(ctx_on(0) == 0);
	t0 = now_s();
	for (;;) {
		double t = now_s() - t0;
		if (write_file && !written && t >= 0.5) {
			CHECK_EQ(write_host_pids_as_the_agent_would(), 1);
			written = 1;
		}
		if (!measuring && t >= warmup) {
			busy0 = fake_cuda_busy_total_ns(0);
			t1 = now_s();
			measuring = 1;
		}
		if (t >= end)
			break;
		CHECK_EQ(cuLaunchKernel(FAKE_KERNEL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL),
			 CUDA_SUCCESS);
	}
	span = now_s() - t1;
	busy1 = fake_cuda_busy_total_ns(0);
	mine = (double)fake_cuda_busy_ns_pid(0, (uint64_t)(span * 1e9), fake_host_pid()) / 1e9 / span * 100;
	others = (double)(busy1 - busy0) / 1e9 / span * 100 - mine;
	fprintf(stderr, "    host pid %u %s the agent's file: own busy %.1f%% (share %.0f%%), "
			"neighbour %.1f%%\n",
		fake_host_pid(), write_file ? "with" : "without", mine, expect, others);
	printf("# util beside a neighbour, %s file: own %.1f neighbour %.1f\n",
	       write_file ? "with" : "without", mine, others);
	check_held_to(mine, expect);
	CHECK(others > neighbour - 10); /* the neighbour did keep the device busy */
	cuCtxSynchronize();
}

/* Threads of this process (the SM watcher is one of them). */
static int threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The watcher thread does not survive a fork: a child forked after it started starts its own on
 * its first throttled launch (sm.c's fork handler, registered by the parent's first one). */
static void a_child_forked_after_the_watcher_started_starts_its_own(void)
{
	pid_t pid;
	int st, before_fork;

	CHECK(ctx_on(0) == 0);
	before_fork = threads();
	CHECK_EQ(cuLaunchKernel(FAKE_KERNEL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
	CHECK_EQ(threads(), before_fork + 1); /* the parent's watcher */
	if ((pid = fork()) == 0) {
		int alone = threads(), bad = 0;
		bad |= (cuLaunchKernel(FAKE_KERNEL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) !=
			CUDA_SUCCESS) << 0;
		bad |= (threads() != alone + 1) << 1;
		_exit(bad);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
	cuCtxSynchronize();
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(device_utilisation_follows_the_limit),
		CASE(smaller_shares_get_less_side_by_side),
		CASE(processes_share_one_sm_limit),
		CASE(neighbour_keeps_the_device_busy),
		CASE(measured_beside_a_neighbour),
		CASE(a_child_forked_after_the_watcher_started_starts_its_own),
	};
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
