/* Task priority across containers over the fake driver. Each case runs real processes: this
 * program re-executed as "worker" with its own environment (its own container: CUDA_TASK_PRIORITY,
 * shared-region file, CUDA_VISIBLE_DEVICES), launching kernels about once a millisecond and
 * publishing its progress in a small shared file. Assertions are on counts and orderings, with
 * windows that close on the high task's launch count (not on the clock) and a HOLD of 1 s where a
 * task must stay held, so that a busy machine's scheduling delays cannot pass for a release;
 * "held" is "resumes no sooner than HOLD after the last stamp" (and within a 10 s deadline).
 * TEST_TMP: a scratch directory (default /tmp); run as root, it must be reachable by nobody, as
 * which the workers of the unwritable-directory case run (root writes anywhere). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

extern char **environ;

#define UUID0 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00" /* the fake's physical device 0 */
#define UUID1 "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae01"
#define BOARD_SIZE 128   /* board layout version 1 (src/priority.c) */
#define BOARD_HIGH_NS 64 /* offset of the last priority-0 launch time */
#define BOARD_HIGH_PID 72 /* offset of the host pid that wrote it */
#define HELD_NS 50000000ULL /* a launch that took longer than this was held */

/* What a worker publishes (times are CLOCK_BOOTTIME, the board's clock). */
struct progress {
	uint64_t launches, errors, held;
	uint64_t last_ns;                /* end of the last successful launch */
	uint64_t held_start_ns, held_end_ns; /* the last held launch */
	uint32_t ready, stop;
};

static uint64_t boot_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static struct progress *map_progress(const char *path, int create)
{
	int fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0666);
	void *p;

	if (fd < 0 || (create && (fchmod(fd, 0666) < 0 || ftruncate(fd, sizeof(struct progress)) < 0)))
		return NULL;
	p = mmap(NULL, sizeof(struct progress), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* ---- the worker: test_priority worker PROGRESS ORDINAL KIND ---- */
static const char *const kinds[] = {"kernel", "ptsz", "ex", "coop", "graph"};
#define NKINDS 5

static int worker(const char *path, int ordinal, const char *kind)
{
	struct progress *p = map_progress(path, 0);
	launch_ptsz_fn ptsz = NULL;
	uint64_t deadline = boot_ns() + 60000000000ULL, t0, t1;

	if (p == NULL || ctx_on(ordinal) != 0)
		return 3;
	cuGetProcAddress("cuLaunchKernel", (void **)&ptsz, 12000,
			 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	if (ptsz == NULL)
		return 4;
	__atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
	for (uint64_t i = 0; !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE) && boot_ns() < deadline; i++) {
		const char *k = strcmp(kind, "all") == 0 ? kinds[i % NKINDS] : kind;
		t0 = boot_ns();
		CUresult r = launch_kind(k, ptsz);
		t1 = boot_ns();
		if (r != CUDA_SUCCESS) {
			__atomic_add_fetch(&p->errors, 1, __ATOMIC_RELAXED);
		} else {
			if (t1 - t0 > HELD_NS) {
				p->held_start_ns = t0;
				__atomic_store_n(&p->held_end_ns, t1, __ATOMIC_RELEASE);
				__atomic_add_fetch(&p->held, 1, __ATOMIC_RELAXED);
			}
			__atomic_store_n(&p->last_ns, t1, __ATOMIC_RELEASE);
			__atomic_add_fetch(&p->launches, 1, __ATOMIC_RELEASE);
		}
		sleep_ms(1);
	}
	cuCtxSynchronize();
	return 0;
}

/* A priority-0 process that stamps the board, then forks a child that stamps it too: the board
 * must then name the child (priority.c's fork handler forgets the parent's pid). Exit 0 if so. */
static int forker(const char *board)
{
	int32_t high_pid = 0;
	pid_t pid;
	int st, fd;

	if (ctx_on(0) != 0 || launch_kind("kernel", NULL) != CUDA_SUCCESS)
		return 2;
	if ((pid = fork()) == 0) {
		sleep_ms(2); /* past the parent's stamp: a board is stamped at most once per ms */
		_exit(launch_kind("kernel", NULL) == CUDA_SUCCESS ? 0 : 1);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 3;
	if ((fd = open(board, O_RDONLY)) < 0)
		return 4;
	if (pread(fd, &high_pid, sizeof(high_pid), BOARD_HIGH_PID) != sizeof(high_pid))
		high_pid = 0;
	close(fd);
	fprintf(stderr, "    board names pid %d; the child is %d, its parent %d\n", (int)high_pid,
		(int)pid, (int)getpid());
	return high_pid == pid ? 0 : 5;
}

/* ---- the cases: containers as processes ---- */
struct task {
	const char *name;
	pid_t pid;
	struct progress *p;
	char err[512]; /* its stderr */
};

static char casedir[256];

static void new_case_dir(const char *name)
{
	const char *tmp = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";

	snprintf(casedir, sizeof(casedir), "%s/prio-%s-XXXXXX", tmp, name);
	CHECK(mkdtemp(casedir) != NULL);
	chmod(casedir, 0777); /* workers may run as nobody */
}

static const char *in_case(const char *name)
{
	static char buf[4][512];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", casedir, name);
	return buf[i];
}

/* Starts a worker in a container of its own. env: "KEY=VALUE" sets, "KEY" unsets (applied after
 * the defaults: priority 1, the case's board dir). as_nobody: drop root (to meet permissions). */
static void start(struct task *t, const char *name, int ordinal, const char *kind,
		  const char *const *env, int as_nobody)
{
	char path[512], region[512], board_dir[512], self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	CHECK(n > 0);
	self[n > 0 ? n : 0] = '\0';
	t->name = name;
	snprintf(path, sizeof(path), "%s/%s.progress", casedir, name);
	snprintf(region, sizeof(region), "%s/%s.region", casedir, name);
	snprintf(board_dir, sizeof(board_dir), "%s/boards", casedir);
	snprintf(t->err, sizeof(t->err), "%s/%s.err", casedir, name);
	mkdir(board_dir, 01777);
	chmod(board_dir, 01777);
	t->p = map_progress(path, 1);
	CHECK(t->p != NULL);
	fflush(NULL);
	if ((t->pid = fork()) == 0) {
		char ord[16];
		int fd = open(t->err, O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (fd >= 0) {
			fchmod(fd, 0666);
			dup2(fd, 2);
		}
		setenv("CUDA_TASK_PRIORITY", "1", 1);
		setenv("CUDA_TASK_PRIORITY_DIR", board_dir, 1);
		setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", region, 1);
		for (; env && *env; env++) {
			char kv[512], *eq;
			snprintf(kv, sizeof(kv), "%s", *env);
			if ((eq = strchr(kv, '=')) != NULL) {
				*eq = '\0';
				setenv(kv, eq + 1, 1);
			} else {
				unsetenv(kv);
			}
		}
		if (as_nobody && geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
			_exit(5);
		snprintf(ord, sizeof(ord), "%d", ordinal);
		execl(self, self, "worker", path, ord, kind, (char *)NULL);
		_exit(6);
	}
	CHECK(t->pid > 0);
}

/* Waits up to `ms` for the task's launch count to reach `n`; returns whether it did. */
static int wait_launches(struct task *t, uint64_t n, unsigned int ms)
{
	for (unsigned int i = 0; i < ms / 10; i++) {
		if (__atomic_load_n(&t->p->launches, __ATOMIC_ACQUIRE) >= n)
			return 1;
		sleep_ms(10);
	}
	return __atomic_load_n(&t->p->launches, __ATOMIC_ACQUIRE) >= n;
}

static int wait_ready(struct task *t)
{
	for (int i = 0; i < 1000 && !__atomic_load_n(&t->p->ready, __ATOMIC_ACQUIRE); i++)
		sleep_ms(10);
	return __atomic_load_n(&t->p->ready, __ATOMIC_ACQUIRE) != 0;
}

static uint64_t launches(struct task *t)
{
	return __atomic_load_n(&t->p->launches, __ATOMIC_ACQUIRE);
}

/* Stops the task; it must exit 0 within 10 s with no failed launch. */
static void stop(struct task *t)
{
	int st = 0;
	pid_t r = 0;

	__atomic_store_n(&t->p->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 1000 && (r = waitpid(t->pid, &st, WNOHANG)) == 0; i++)
		sleep_ms(10);
	if (r == 0) {
		fprintf(stderr, "    %s did not stop\n", t->name);
		kill(t->pid, SIGKILL);
		waitpid(t->pid, &st, 0);
	}
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		fprintf(stderr, "    %s: status %#x\n", t->name, st);
	CHECK(r == t->pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(t->p->errors, 0);
}

static void stop_all(struct task *t, int n)
{
	for (int i = 0; i < n; i++)
		__atomic_store_n(&t[i].p->stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < n; i++)
		stop(&t[i]);
}

/* Lines of the task's stderr that contain `needle`. */
static int err_lines(const struct task *t, const char *needle)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(t->err, "r");

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static uint64_t board_stamp(const char *uuid)
{
	char path[600];
	uint64_t v = 0;
	int fd;

	snprintf(path, sizeof(path), "%s/boards/%s.board", casedir, uuid);
	if ((fd = open(path, O_RDONLY)) < 0 || pread(fd, &v, sizeof(v), BOARD_HIGH_NS) != sizeof(v))
		v = 0;
	if (fd >= 0)
		close(fd);
	return v;
}

/* Progress of `low` over a window of at least `ms` in which `high` makes 40 launches (at most
 * 20 s: a busy machine may run it slowly): reports and returns both. */
static void window(struct task *high, struct task *low, unsigned int ms, uint64_t *dh, uint64_t *dl)
{
	uint64_t h0 = launches(high), l0 = launches(low);

	sleep_ms(ms);
	for (int i = 0; i < 2000 && launches(high) < h0 + 40; i++)
		sleep_ms(10);
	*dh = launches(high) - h0;
	*dl = launches(low) - l0;
	fprintf(stderr, "    %u ms: %s %llu launches, %s %llu\n", ms, high->name,
		(unsigned long long)*dh, low->name, (unsigned long long)*dl);
}

/* The low task is held: (almost) no launches while the high one makes many. */
#define CHECK_HELD(dh, dl) do { CHECK((dh) >= 20); CHECK((dl) <= 3 + (dh) / 20); } while (0)
/* The task runs freely: 20 more launches (within 20 s, however busy the machine). */
#define CHECK_RUNS(t) CHECK(wait_launches((t), launches(t) + 20, 20000))

static const char *const HIGH[] = {"CUDA_TASK_PRIORITY=0", NULL};
/* A low task that must stay held: a HOLD longer than any pause of a busy machine's scheduler */
static const char *const LOW_HELD[] = {"CUDA_TASK_PRIORITY_HOLD_MS=1000", "LIBVGPU_LOG_LEVEL=debug",
				       NULL};
#define HOLD_NS 1000000000ULL

static void low_waits_while_high_launches_and_resumes_after_the_hold(void)
{
	struct task t[2];
	uint64_t dh, dl, stamp, resumed;

	static const char *const high_logged[] = {"CUDA_TASK_PRIORITY=0", "LIBVGPU_LOG_LEVEL=debug", NULL};

	new_case_dir("hold");
	start(&t[0], "high", 0, "all", high_logged, 0);
	CHECK(wait_launches(&t[0], 20, 10000));
	start(&t[1], "low", 0, "all", LOW_HELD, 0);
	CHECK(wait_ready(&t[1]));
	window(&t[0], &t[1], 1000, &dh, &dl);
	CHECK_HELD(dh, dl);
	/* the high task stops: the low one's held launch returns HOLD (1 s) after the last stamp */
	stop(&t[0]);
	stamp = board_stamp(UUID0);
	CHECK(wait_launches(&t[1], launches(&t[1]) + 20, 20000));
	resumed = __atomic_load_n(&t[1].p->held_end_ns, __ATOMIC_ACQUIRE);
	fprintf(stderr, "    resumed %.1f ms after the last stamp (hold 1000 ms)\n",
		((double)resumed - (double)stamp) / 1e6);
	CHECK(stamp != 0 && resumed >= stamp + HOLD_NS);
	CHECK(resumed <= stamp + HOLD_NS + 10000000000ULL); /* a deadline, not a speed */
	CHECK(t[1].p->held >= 1 && err_lines(&t[1], "held") >= 1);
	CHECK_EQ(err_lines(&t[0], "held"), 0); /* the high task never waits (libvgpu logs each wait) */
	stop(&t[1]);
}

static void kill9_of_the_high_task_lets_the_low_one_resume(void)
{
	static const char *const high_hold[] = {"CUDA_TASK_PRIORITY=0",
						"CUDA_TASK_PRIORITY_HOLD_MS=1000", NULL};
	struct task t[2];
	uint64_t dh, dl, stamp, resumed;
	int st;

	new_case_dir("kill9");
	start(&t[0], "high", 0, "kernel", high_hold, 0);
	CHECK(wait_launches(&t[0], 20, 10000));
	start(&t[1], "low", 0, "kernel", LOW_HELD, 0);
	CHECK(wait_ready(&t[1]));
	window(&t[0], &t[1], 700, &dh, &dl);
	CHECK_HELD(dh, dl);
	kill(t[0].pid, SIGKILL);
	waitpid(t[0].pid, &st, 0);
	CHECK(WIFSIGNALED(st));
	stamp = board_stamp(UUID0);
	CHECK(wait_launches(&t[1], launches(&t[1]) + 20, 20000));
	resumed = __atomic_load_n(&t[1].p->held_end_ns, __ATOMIC_ACQUIRE);
	fprintf(stderr, "    resumed %.1f ms after the dead task's last stamp (hold 1000 ms)\n",
		((double)resumed - (double)stamp) / 1e6);
	CHECK(stamp != 0 && resumed >= stamp + HOLD_NS);
	CHECK(resumed <= stamp + HOLD_NS + 10000000000ULL); /* a deadline, not a speed */
	stop(&t[1]);
}

static void two_low_tasks_do_not_block_each_other(void)
{
	struct task t[2];
	struct stat st;
	uint64_t d0, d1;
	char board[600];
	unsigned char head[8];
	int fd;

	new_case_dir("lowlow");
	start(&t[0], "low-a", 0, "all", NULL, 0);
	start(&t[1], "low-b", 0, "all", NULL, 0);
	CHECK(wait_ready(&t[0]) && wait_ready(&t[1]));
	window(&t[0], &t[1], 1000, &d0, &d1);
	CHECK_RUNS(&t[0]);
	CHECK_RUNS(&t[1]);
	/* the board was created on demand: 128 bytes, 0666 whatever the umask, version 1 */
	snprintf(board, sizeof(board), "%s/boards/%s.board", casedir, UUID0);
	CHECK(stat(board, &st) == 0 && st.st_size == BOARD_SIZE && (st.st_mode & 0777) == 0666);
	CHECK((fd = open(board, O_RDONLY)) >= 0 && read(fd, head, 8) == 8);
	CHECK(memcmp(head, "VPRO\1\0\0\0", 8) == 0);
	if (fd >= 0)
		close(fd);
	CHECK_EQ(board_stamp(UUID0), 0); /* nobody of priority 0 launched */
	stop_all(t, 2);
}

/* Boards are per device UUID: FAKE_CUDA_DEVICES=2, and CUDA_VISIBLE_DEVICES renumbers. */
static void a_high_task_on_another_gpu_does_not_block(void)
{
	static const char *const high[] = {"FAKE_CUDA_DEVICES=2", "CUDA_TASK_PRIORITY=0",
					   "CUDA_VISIBLE_DEVICES=1", NULL};
	static const char *const on0[] = {"FAKE_CUDA_DEVICES=2", "CUDA_VISIBLE_DEVICES=0", NULL};
	static const char *const on1[] = {"FAKE_CUDA_DEVICES=2", "CUDA_VISIBLE_DEVICES=1",
					  "CUDA_TASK_PRIORITY_HOLD_MS=1000", NULL};
	static const char *const all[] = {"FAKE_CUDA_DEVICES=2", "CUDA_VISIBLE_DEVICES",
					  "CUDA_TASK_PRIORITY_HOLD_MS=1000", NULL};
	struct task t[4];
	uint64_t dh, d_other, d_same, d_ordinal;

	new_case_dir("otherdev");
	start(&t[0], "high-gpu1", 0, "all", high, 0);
	CHECK(wait_launches(&t[0], 20, 10000));
	start(&t[1], "low-gpu0", 0, "all", on0, 0);
	start(&t[2], "low-gpu1", 0, "all", on1, 0);        /* ordinal 0 = GPU 1: same UUID */
	start(&t[3], "low-gpu1-ordinal1", 1, "all", all, 0); /* all visible, ordinal 1 = GPU 1 */
	CHECK(wait_ready(&t[1]) && wait_ready(&t[2]) && wait_ready(&t[3]));
	window(&t[0], &t[1], 1000, &dh, &d_other);
	CHECK_RUNS(&t[1]);
	window(&t[0], &t[2], 500, &dh, &d_same);
	CHECK_HELD(dh, d_same);
	window(&t[0], &t[3], 500, &dh, &d_ordinal);
	CHECK_HELD(dh, d_ordinal);
	CHECK(board_stamp(UUID1) != 0);
	CHECK_EQ(board_stamp(UUID0), 0);
	stop_all(t, 4);
}

static void every_launch_kind_stamps_and_waits(void)
{
	for (int k = 0; k < NKINDS; k++) {
		struct task t[2];
		uint64_t dh, dl;

		new_case_dir(kinds[k]);
		start(&t[0], "high", 0, kinds[k], HIGH, 0);
		CHECK(wait_launches(&t[0], 20, 10000));
		start(&t[1], "low", 0, kinds[k], LOW_HELD, 0);
		CHECK(wait_ready(&t[1]));
		fprintf(stderr, "    %s:\n", kinds[k]);
		window(&t[0], &t[1], 500, &dh, &dl);
		CHECK_HELD(dh, dl);
		stop_all(t, 2);
	}
}

static int count_boards(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += strstr(e->d_name, ".board") != NULL;
	closedir(d);
	return n;
}

static void without_a_board_dir_nothing_is_created_and_nothing_waits(void)
{
	static const char *const high[] = {"CUDA_TASK_PRIORITY=0", "CUDA_TASK_PRIORITY_DIR", NULL};
	static const char *const low[] = {"CUDA_TASK_PRIORITY_DIR", NULL};
	struct task t[2];
	uint64_t dh, dl;
	char cwd[4096];

	new_case_dir("nodir");
	CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
	CHECK(chdir(casedir) == 0); /* the workers' working directory */
	start(&t[0], "high", 0, "all", high, 0);
	start(&t[1], "low", 0, "all", low, 0);
	CHECK(chdir(cwd) == 0);
	CHECK(wait_ready(&t[0]) && wait_ready(&t[1]));
	window(&t[0], &t[1], 1000, &dh, &dl);
	CHECK_RUNS(&t[1]);
	stop_all(t, 2);
	CHECK_EQ(count_boards(casedir), 0);
	CHECK_EQ(count_boards(in_case("boards")), 0);
	CHECK_EQ(err_lines(&t[0], "libvgpu"), 0);
	CHECK_EQ(err_lines(&t[1], "libvgpu"), 0);
}

/* A missing or unwritable dir: one warning per process, launches run unblocked (fail open). */
static void an_unusable_board_dir_warns_once_and_runs_unblocked(void)
{
	for (int unwritable = 0; unwritable < 2; unwritable++) {
		char dir_env[600];
		const char *high[] = {"CUDA_TASK_PRIORITY=0", dir_env, NULL};
		const char *low[] = {dir_env, NULL};
		struct task t[2];
		uint64_t dh, dl;

		new_case_dir(unwritable ? "readonly" : "missing");
		if (unwritable) {
			snprintf(dir_env, sizeof(dir_env), "CUDA_TASK_PRIORITY_DIR=%s", in_case("ro"));
			CHECK(mkdir(in_case("ro"), 0555) == 0 && chmod(in_case("ro"), 0555) == 0);
		} else {
			snprintf(dir_env, sizeof(dir_env), "CUDA_TASK_PRIORITY_DIR=%s", in_case("none"));
		}
		start(&t[0], "high", 0, "all", high, unwritable);
		CHECK(wait_launches(&t[0], 20, 10000));
		start(&t[1], "low", 0, "all", low, unwritable);
		CHECK(wait_ready(&t[1]));
		fprintf(stderr, "    %s dir:\n", unwritable ? "unwritable" : "missing");
		window(&t[0], &t[1], 700, &dh, &dl);
		CHECK_RUNS(&t[1]);
		stop_all(t, 2);
		for (int i = 0; i < 2; i++) {
			CHECK_EQ(err_lines(&t[i], "not enforced"), 1);
			CHECK_EQ(err_lines(&t[i], "priority board"), 1);
		}
		CHECK_EQ(count_boards(in_case("ro")), 0);
	}
}

/* A board file that is not ours (short, foreign, another version) is left alone. */
static void a_foreign_board_file_warns_and_runs_unblocked(void)
{
	static const struct {
		const char *name, *why;
		size_t size;
		unsigned char fill;
	} files[] = {
		{"short", "has 10 bytes", 10, 'x'},
		{"foreign", "is not a version-1 board", BOARD_SIZE, 'x'},
		{"version2", "is not a version-1 board", BOARD_SIZE, 0},
	};

	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		unsigned char content[BOARD_SIZE], after[BOARD_SIZE + 1];
		char path[600];
		struct task t[2];
		uint64_t dh, dl;
		int fd;

		new_case_dir(files[f].name);
		mkdir(in_case("boards"), 01777);
		memset(content, files[f].fill, sizeof(content));
		if (files[f].fill == 0)
			memcpy(content, "VPRO\2\0\0\0", 8);
		snprintf(path, sizeof(path), "%s/boards/%s.board", casedir, UUID0);
		CHECK((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666)) >= 0);
		CHECK(write(fd, content, files[f].size) == (ssize_t)files[f].size);
		close(fd);
		start(&t[0], "high", 0, "all", HIGH, 0);
		CHECK(wait_launches(&t[0], 20, 10000));
		start(&t[1], "low", 0, "all", NULL, 0);
		CHECK(wait_ready(&t[1]));
		fprintf(stderr, "    %s file:\n", files[f].name);
		window(&t[0], &t[1], 700, &dh, &dl);
		CHECK_RUNS(&t[1]);
		stop_all(t, 2);
		for (int i = 0; i < 2; i++) {
			CHECK_EQ(err_lines(&t[i], files[f].why), 1);
			CHECK_EQ(err_lines(&t[i], "libvgpu"), 1);
		}
		/* untouched */
		CHECK((fd = open(path, O_RDONLY)) >= 0);
		CHECK(read(fd, after, sizeof(after)) == (ssize_t)files[f].size);
		CHECK(memcmp(after, content, files[f].size) == 0);
		close(fd);
	}
}

static void a_forked_child_stamps_the_board_with_its_own_pid(void)
{
	char self[4096], boards[600], board[700];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	pid_t pid;
	int st;

	CHECK(n > 0);
	self[n > 0 ? n : 0] = '\0';
	new_case_dir("fork");
	snprintf(boards, sizeof(boards), "%s/boards", casedir);
	snprintf(board, sizeof(board), "%s/%s.board", boards, UUID0);
	CHECK(mkdir(boards, 01777) == 0);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		setenv("CUDA_TASK_PRIORITY", "0", 1);
		setenv("CUDA_TASK_PRIORITY_DIR", boards, 1);
		setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", in_case("fork.region"), 1);
		execl(self, self, "forker", board, (char *)NULL);
		_exit(6);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
	CHECK_EQ(WEXITSTATUS(st), 0);
}

int main(int argc, char **argv)
{
	static const struct check_case cases[] = {
		CASE(low_waits_while_high_launches_and_resumes_after_the_hold),
		CASE(kill9_of_the_high_task_lets_the_low_one_resume),
		CASE(two_low_tasks_do_not_block_each_other),
		CASE(a_high_task_on_another_gpu_does_not_block),
		CASE(every_launch_kind_stamps_and_waits),
		CASE(without_a_board_dir_nothing_is_created_and_nothing_waits),
		CASE(an_unusable_board_dir_warns_once_and_runs_unblocked),
		CASE(a_foreign_board_file_warns_and_runs_unblocked),
		CASE(a_forked_child_stamps_the_board_with_its_own_pid),
	};

	if (argc == 3 && strcmp(argv[1], "forker") == 0)
		return forker(argv[2]);
	if (argc == 5 && strcmp(argv[1], "worker") == 0)
		return worker(argv[2], atoi(argv[3]), argv[4]);
	signal(SIGPIPE, SIG_IGN);
	umask(027); /* boards must still come out 0666 */
	return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
