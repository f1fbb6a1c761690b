/* N processes of one container start at once: each is exec'd, waits for the starting gun,
 * then initialises CUDA, makes its first allocation and asks for memory info. Reports the
 * time from the gun to that point per process: "<p50 ms> <p99 ms> <max ms> <failures>".
 * usage: bench_start N            (children: bench_start --child FD) */
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int child(int gun, int out)
{
	CUdeviceptr p;
	uint64_t t0, r[2];
	char c;

	if (read(gun, &c, 1) != 0) /* returns 0 when the parent closes the gun */
		return 1;
	t0 = now_ns();
	r[1] = ctx_on(0) != 0 || cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS || free_mem() == (size_t)-1;
	r[0] = now_ns() - t0;
	return write(out, r, sizeof(r)) == sizeof(r) ? 0 : 1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 300, gun[2], res[2], failures = 0;
	uint64_t *lat, r[2];
	pid_t *pids;
	char a[16], b[16];

	if (argc == 4 && strcmp(argv[1], "--child") == 0)
		return child(atoi(argv[2]), atoi(argv[3]));
	lat = calloc((size_t)n, sizeof(*lat));
	pids = calloc((size_t)n, sizeof(*pids));
	if (pipe(gun) || pipe(res))
		return 1;
	snprintf(a, sizeof(a), "%d", gun[0]);
	snprintf(b, sizeof(b), "%d", res[1]);
	for (int i = 0; i < n; i++) {
		if ((pids[i] = fork()) == 0) {
			close(gun[1]);
			execl("/proc/self/exe", "bench_start", "--child", a, b, (char *)NULL);
			_exit(127);
		}
	}
	usleep(300000 + 3000 * n); /* let every child reach its read() */
	close(gun[1]);
	close(res[1]);
	int got = 0;
	while (got < n && read(res[0], r, sizeof(r)) == sizeof(r)) {
		lat[got++] = r[0];
		failures += (int)r[1];
	}
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		failures += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	failures += n - got;
	qsort(lat, (size_t)got, sizeof(*lat), cmp);
	if (got == 0)
		return 1;
	printf("%.1f %.1f %.1f %d\n", lat[got / 2] / 1e6, lat[(got * 99) / 100 < got ? (got * 99) / 100 : got - 1] / 1e6,
	       lat[got - 1] / 1e6, failures);
	return 0;
}
