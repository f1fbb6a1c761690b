/*
 * SM shares. A launch costs blocks × threads-per-block "work units". Per device, launches draw
 * on a token bucket refilled at `rate` units/s. A watcher thread polls the container's
 * utilisation U (NVML, summed over the container's host pids: the slots' own, else the node
 * agent's host-pids file; else the device's utilisation) every tick; on each new sample
 *     rate = consumed_rate × limit / U     (both averaged over the last HISTORY samples)
 * i.e. the rate that would have produced exactly the limit, smoothed and bounded to ×½..×2 per
 * update. The controller is scale-free: nothing depends on SM count, so a 188-SM card throttles as
 * accurately as a 16-SM one. Graph launches cost one full wave of the device each.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "region.h"
#include "vgpu.h"

#define TICK_NS 100000000ULL  /* watcher period */
#define BURST_S 0.02          /* bucket depth, seconds of rate */
#define MAX_SLEEP_NS 200000000ULL
#define MAX_SAMPLES 256
#define HISTORY 10 /* measurements averaged per rate update: about NVML's own 1 s window */

struct sm_dev {
	pthread_mutex_t mu;
	double rate;     /* units per second; 0 = not throttling yet */
	double tokens;
	uint64_t last_ns;
	uint64_t spent;  /* units launched since the last measurement (atomic) */
	uint64_t launches;
	unsigned int limit;
	int watched;     /* the watcher measures this device */
	uint64_t wave;   /* units of one full wave: SMs × max threads per SM */
	nvmlDevice_t nvml;
	unsigned long long last_seen_us;
	uint64_t measured_ns; /* when utilisation was last measured (or watching began) */
	double hist_consumed[HISTORY], hist_util[HISTORY]; /* the last measurements */
	unsigned int hist_n, hist_i;
};

static struct sm_dev sm[VGPU_MAX_DEVICES];
static int watcher_started;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

/* The container's host pids, gathered once per tick for every watched device. */
struct host_pids {
	int32_t pid[VGPU_REGION_SLOTS];
	int n;
};

/* Container SM utilisation of the device in percent; -1 when there is nothing new to go by. */
static double measure(struct sm_dev *s, const struct host_pids *hp)
{
	nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
	const int32_t *pids = hp->pid;
	unsigned int n = MAX_SAMPLES;
	nvmlUtilization_t u;
	nvmlReturn_t r = NVML_ERROR_NOT_SUPPORTED;
	int npids = hp->n;

	if (npids > 0)
		r = real_nvmlDeviceGetProcessUtilization(s->nvml, samples, &n, s->last_seen_us);
	if (r == NVML_ERROR_NOT_FOUND)
		return -1; /* no sample since the last one we used: keep the current rate */
	if (r == NVML_SUCCESS) {
		double sum = 0;
		unsigned long long newest = s->last_seen_us;
		int matched = 0;
		for (int p = 0; p < npids; p++) {
			unsigned int cnt = 0, tot = 0;
			for (unsigned int i = 0; i < n && i < MAX_SAMPLES; i++) {
				if ((int32_t)samples[i].pid != pids[p] || samples[i].smUtil > 100)
					continue;
				tot += samples[i].smUtil;
				cnt++;
				matched = 1;
				if (samples[i].timeStamp > newest)
					newest = samples[i].timeStamp;
			}
			if (cnt)
				sum += (double)tot / cnt;
		}
		s->last_seen_us = newest;
		if (matched)
			return sum > 100 ? 100 : sum;
		/* samples, none of them ours: our host pids are not NVML's (a pid namespace the
		 * NStgid check did not see through, a stale agent file); fall through to the
		 * device's figure */
	}
	/* No per-process numbers (no host pid, neither from NStgid nor from the node agent's
	 * host-pids file; or not supported): the device's utilisation,
	 * neighbours included, is an upper bound on ours, so throttling on it errs on the safe
	 * side. */
	if (real_nvmlDeviceGetUtilizationRates(s->nvml, &u) == NVML_SUCCESS && u.gpu <= 100)
		return u.gpu;
	return -1;
}

static void tick(struct sm_dev *s, uint64_t now, const struct host_pids *hp)
{
	uint64_t launches = __atomic_exchange_n(&s->launches, 0, __ATOMIC_ACQ_REL);
	double u = measure(s, hp), consumed, dt, c_sum = 0, u_sum = 0, target;

	vgpu_region_publish(launches, u < 0 ? 0 : (uint32_t)lround(u));
	if (u < 0)
		return; /* no new sample: what was launched counts towards the next one */
	/* consumption over the same span the new sample covers: since the previous one */
	dt = (double)(now - s->measured_ns) / 1e9;
	s->measured_ns = now;
	consumed = dt > 0 ? (double)__atomic_exchange_n(&s->spent, 0, __ATOMIC_ACQ_REL) / dt : 0;
	s->hist_consumed[s->hist_i] = consumed;
	s->hist_util[s->hist_i] = u;
	s->hist_i = (s->hist_i + 1) % HISTORY;
	if (s->hist_n < HISTORY)
		s->hist_n++;
	for (unsigned int i = 0; i < s->hist_n; i++) {
		c_sum += s->hist_consumed[i];
		u_sum += s->hist_util[i];
	}
	pthread_mutex_lock(&s->mu);
	if (s->rate == 0) {
		if (u > s->limit && consumed > 0) {
			s->rate = consumed * s->limit / u;
			s->tokens = 0;
			s->last_ns = vgpu_clock_ns(CLOCK_MONOTONIC);
			s->hist_n = s->hist_i = 0; /* history from before throttling says little */
		}
	} else {
		/* the rate that would have given exactly the limit over the recent samples */
		if (u_sum >= s->hist_n && c_sum > 0)
			target = c_sum * s->limit / u_sum;
		else
			target = s->rate * 2; /* idle or nearly: let it grow */
		if (target > s->rate * 2)
			target = s->rate * 2;
		if (target < s->rate / 2)
			target = s->rate / 2;
		s->rate = 0.5 * s->rate + 0.5 * target;
	}
	pthread_mutex_unlock(&s->mu);
	LOG_DEBUG("sm: util %.1f%% limit %u%% consumed %.0f/s rate %.0f/s", u, s->limit, consumed,
		  s->rate);
}

static void *watcher(void *arg)
{
	static struct host_pids hp; /* this thread's only */
	uint64_t t;
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		vgpu_sleep_ns(TICK_NS);
		t = vgpu_clock_ns(CLOCK_MONOTONIC);
		/* once per tick: a slot without a host pid costs one read of the agent's file */
		hp.n = vgpu_region_host_pids(hp.pid, VGPU_REGION_SLOTS);
		for (int d = 0; d < VGPU_MAX_DEVICES; d++)
			if (__atomic_load_n(&sm[d].watched, __ATOMIC_ACQUIRE))
				tick(&sm[d], t, &hp);
	}
	return NULL;
}

/* The watcher thread does not survive a fork: a child starts afresh, with its own. */
static void forget_parent_watcher(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	start_mu = fresh;
	watcher_started = 0;
	for (int d = 0; d < VGPU_MAX_DEVICES; d++) {
		memset(&sm[d], 0, sizeof(sm[d]));
		sm[d].mu = fresh;
	}
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, forget_parent_watcher);
}

/* First throttled launch on device `dev`: find its NVML handle and start the watcher. */
static void watch(CUdevice dev)
{
	struct sm_dev *s = &sm[dev];
	char uuid[64];
	int v = 0, n = 0;
	pthread_t th;
	pthread_attr_t attr;
	static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

	/* before any sm state is used: a device's state is only touched once it is watched */
	pthread_once(&fork_once, register_fork_handler);
	pthread_mutex_lock(&start_mu);
	if (s->watched)
		goto out;
	s->limit = vgpu_sm_limit(dev);
	if (real_cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
	    real_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev))
		n = v = 0;
	s->wave = n > 0 && v > 0 ? (uint64_t)n * (uint64_t)v : 1ULL << 18;
	vgpu_dev_uuid(dev, uuid, sizeof(uuid));
	if (real_nvmlInit_v2() != NVML_SUCCESS ||
	    real_nvmlDeviceGetHandleByUUID(uuid, &s->nvml) != NVML_SUCCESS) {
		LOG_WARN("device %d: NVML cannot measure its utilisation; SM limit %u%% not enforced",
			 (int)dev, s->limit);
		s->limit = 0;
		goto out;
	}
	vgpu_dev_index(dev); /* so the device is in the region for metrics */
	s->measured_ns = vgpu_clock_ns(CLOCK_MONOTONIC);
	__atomic_store_n(&s->watched, 1, __ATOMIC_RELEASE);
	if (!watcher_started) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, watcher, NULL) == 0)
			watcher_started = 1;
		else
			LOG_ERR("cannot start the SM watcher thread; SM limits not enforced");
		pthread_attr_destroy(&attr);
	}
out:
	pthread_mutex_unlock(&start_mu);
}

/* Waits until the device's share allows `units` more work. */
static void throttle(uint64_t units, int graph)
{
	struct sm_dev *s;
	uint64_t t, wait = 0;
	int dev;

	if ((dev = vgpu_current_device()) < 0 || vgpu_sm_limit(dev) == 0)
		return;
	s = &sm[dev];
	if (!__atomic_load_n(&s->watched, __ATOMIC_ACQUIRE)) {
		watch(dev);
		if (!__atomic_load_n(&s->watched, __ATOMIC_ACQUIRE))
			return;
	}
	if (graph)
		units = s->wave;
	__atomic_add_fetch(&s->spent, units, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->launches, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->mu);
	if (s->rate > 0) {
		t = vgpu_clock_ns(CLOCK_MONOTONIC);
		s->tokens += s->rate * (double)(t - s->last_ns) / 1e9;
		if (s->tokens > s->rate * BURST_S)
			s->tokens = s->rate * BURST_S;
		s->last_ns = t;
		s->tokens -= (double)units;
		if (s->tokens < 0)
			wait = (uint64_t)(-s->tokens / s->rate * 1e9);
	}
	pthread_mutex_unlock(&s->mu);
	if (wait)
		vgpu_sleep_ns(wait < MAX_SLEEP_NS ? wait : MAX_SLEEP_NS);
}

/* Everything a launch waits for, in order: with a limits file, a device it names (else the
 * launch is refused), a priority-0 task on the device, then the SM share. Without any of them
 * configured, one branch. */
static inline CUresult gate(uint64_t units, int graph)
{
	if (!vgpu_cfg.gate_launches)
		return CUDA_SUCCESS;
	if (vgpu_launch_denied())
		return CUDA_ERROR_INVALID_DEVICE;
	if (vgpu_cfg.priority_dir[0])
		vgpu_priority_launch();
	if (vgpu_cfg.any_sm_limit)
		throttle(units, graph);
	return CUDA_SUCCESS;
}

#define GATE(units, graph)                                                                         \
	do {                                                                                       \
		CUresult gated_ = gate(units, graph);                                              \
		if (gated_ != CUDA_SUCCESS)                                                        \
			return gated_;                                                             \
	} while (0)

static uint64_t blocks(unsigned int x, unsigned int y, unsigned int z)
{
	return (uint64_t)x * y * z;
}

CUresult cuLaunchKernel VGPU_LAUNCH_PARAMS
{
	VGPU_ENTER();
	GATE(blocks(gridDimX, gridDimY, gridDimZ) * blocks(blockDimX, blockDimY, blockDimZ), 0);
	return real_cuLaunchKernel VGPU_LAUNCH_ARGS;
}

CUresult cuLaunchKernel_ptsz VGPU_LAUNCH_PARAMS
{
	VGPU_ENTER();
	GATE(blocks(gridDimX, gridDimY, gridDimZ) * blocks(blockDimX, blockDimY, blockDimZ), 0);
	return real_cuLaunchKernel_ptsz VGPU_LAUNCH_ARGS;
}

CUresult cuLaunchCooperativeKernel VGPU_COOP_PARAMS
{
	VGPU_ENTER();
	GATE(blocks(gridDimX, gridDimY, gridDimZ) * blocks(blockDimX, blockDimY, blockDimZ), 0);
	return real_cuLaunchCooperativeKernel VGPU_COOP_ARGS;
}

CUresult cuLaunchCooperativeKernel_ptsz VGPU_COOP_PARAMS
{
	VGPU_ENTER();
	GATE(blocks(gridDimX, gridDimY, gridDimZ) * blocks(blockDimX, blockDimY, blockDimZ), 0);
	return real_cuLaunchCooperativeKernel_ptsz VGPU_COOP_ARGS;
}

static uint64_t config_units(const CUlaunchConfig *c)
{
	return c ? blocks(c->gridDimX, c->gridDimY, c->gridDimZ) *
			   blocks(c->blockDimX, c->blockDimY, c->blockDimZ)
		 : 1;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
			  void **extra)
{
	VGPU_ENTER();
	GATE(config_units(config), 0);
	return real_cuLaunchKernelEx(config, f, kernelParams, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
			       void **extra)
{
	VGPU_ENTER();
	GATE(config_units(config), 0);
	return real_cuLaunchKernelEx_ptsz(config, f, kernelParams, extra);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	VGPU_ENTER();
	GATE(0, 1);
	return real_cuGraphLaunch(hGraphExec, hStream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	VGPU_ENTER();
	GATE(0, 1);
	return real_cuGraphLaunch_ptsz(hGraphExec, hStream);
}
