/*
 * The limits file: the claim's limits as the node agent wrote them, mounted read-only into the
 * container at VGPU_LIMITS_FILE (compiled in: a path from the environment would let a process
 * name a file of its own). Version 2 keys every device by its GPU UUID, because the tenant
 * controls CUDA ordinals (CUDA_VISIBLE_DEVICES reorders them, and CUDA's own enumeration need
 * not follow the allocation):
 *     vgpu-bridge-limits 2
 *     CUDA_DEVICE_MEMORY_LIMIT_<uuid>=<bytes>    the environment's value syntax; <uuid> is
 *     CUDA_DEVICE_SM_LIMIT_<uuid>=<percent>      "GPU-" and letters, digits and '-' (at most 63)
 *     CUDA_TASK_PRIORITY=<0..1000>
 *     CUDA_DEVICE_MEMORY_SHARED_CACHE=<path>     the claim's region (the environment's is ignored)
 * one KEY=VALUE per line, at most 16 devices and 4096 bytes; blank lines allowed. When the file
 * is there it decides: each device the process sees is looked up by cuDeviceGetUuid (NVML
 * devices by nvmlDeviceGetUUID); a device the file does not name gets no context, no memory
 * and no launches (vgpu_dev_denied), never an unlimited share. The environment's
 * CUDA_DEVICE_MEMORY_LIMIT[_<i>] and CUDA_DEVICE_SM_LIMIT[_<i>] do not apply (they name devices by
 * ordinal; the node agent's CDI spec still sets them for HAMi-style tools that read them); the
 * container's own share (VGPU_CONTAINER_*) may only lower a device's limit, and the environment
 * may only make the priority lower (a larger number).
 * Absent (ENOENT, ENOTDIR): the environment alone. Anything else (a link, a FIFO, unreadable,
 * too long, another header (version 1 included), an unknown or repeated key, a bad value): fail
 * closed, naming the file.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vgpu.h"

#define LIMITS_MAX_BYTES 4096
#define LIMITS_MAX_SETTINGS 256
#define LIMITS_HEADER "vgpu-bridge-limits 2"
#define MEM_KEY "CUDA_DEVICE_MEMORY_LIMIT_"
#define SM_KEY "CUDA_DEVICE_SM_LIMIT_"

static int file_fail(struct vgpu_config *cfg, const char *path, int line, const char *why)
{
	if (!cfg->failed && line > 0)
		snprintf(cfg->error, sizeof(cfg->error), "%.200s line %d: %.290s", path, line, why);
	else if (!cfg->failed)
		snprintf(cfg->error, sizeof(cfg->error), "%.200s: %.300s", path, why);
	cfg->failed = true;
	return -1;
}

/* 0: absent; 1: read into buf (NUL-terminated, *len bytes); -1: there but unusable (*why). */
static int read_limits(const char *path, char *buf, size_t *len, const char **why)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	*len = 0;
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		*why = errno == ELOOP ? "is a symbolic link" : "cannot be opened";
		return -1;
	}
	*why = fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ? "is not a regular file" : NULL;
	while (*why == NULL && *len <= LIMITS_MAX_BYTES) {
		n = read(fd, buf + *len, LIMITS_MAX_BYTES + 1 - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*why = n < 0 ? "cannot be read" : NULL;
			break;
		}
		*len += (size_t)n;
	}
	close(fd);
	if (*why == NULL && *len > LIMITS_MAX_BYTES)
		*why = "is larger than 4096 bytes";
	buf[*len] = '\0';
	return *why ? -1 : 1;
}

/* The UUID a per-device key names, or NULL when `setting` is not one. */
static const char *device_key_uuid(const char *setting)
{
	if (strncmp(setting, MEM_KEY, strlen(MEM_KEY)) == 0)
		return setting + strlen(MEM_KEY);
	if (strncmp(setting, SM_KEY, strlen(SM_KEY)) == 0)
		return setting + strlen(SM_KEY);
	return NULL;
}

/* "GPU-" then 1..59 letters, digits or '-', up to `end`. */
static bool uuid_token(const char *u, const char *end)
{
	if (end - u < 5 || end - u >= VGPU_UUID_LEN || strncmp(u, "GPU-", 4) != 0)
		return false;
	for (const char *c = u + 4; c < end; c++)
		if (!isalnum((unsigned char)*c) && *c != '-')
			return false;
	return true;
}

/* Length of the key of a KEY=VALUE setting, or 0 when it is not one the file may set. */
static size_t known_key(const char *setting)
{
	static const char *const keys[] = {"CUDA_TASK_PRIORITY", "CUDA_DEVICE_MEMORY_SHARED_CACHE"};
	size_t klen = strcspn(setting, "=");
	const char *uuid = device_key_uuid(setting);

	if (setting[klen] != '=')
		return 0;
	if (uuid != NULL)
		return uuid_token(uuid, setting + klen) ? klen : 0;
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (klen == strlen(keys[k]) && strncmp(setting, keys[k], klen) == 0)
			return klen;
	return 0;
}

static bool repeated(char *const *settings, int n, const char *setting, size_t klen)
{
	for (int i = 0; i < n; i++)
		if (strncmp(settings[i], setting, klen + 1) == 0)
			return true;
	return false;
}

/* Splits the text into NULL-terminated KEY=VALUE settings, in place. 0, or the faulty line. */
static int split_settings(char *text, size_t len, char **settings, const char **why)
{
	char *line = text, *next;
	int n = 0;

	if (strlen(text) != len) {
		*why = "contains a NUL byte";
		return 1;
	}
	for (int lineno = 1; line != NULL; lineno++, line = next) {
		size_t klen;
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if (lineno == 1 && strcmp(line, "vgpu-bridge-limits 1") == 0)
			*why = "version 1 (limits by CUDA ordinal) is not accepted: the first line must be "
			       "\"" LIMITS_HEADER "\" (limits by GPU UUID)";
		else if (lineno == 1 && strcmp(line, LIMITS_HEADER) != 0)
			*why = "the first line is not \"" LIMITS_HEADER "\"";
		else if (lineno == 1 || *line == '\0')
			continue;
		else if ((klen = known_key(line)) == 0)
			*why = "not a KEY=VALUE line with a limit's name (per device: _GPU-<uuid>)";
		else if (repeated(settings, n, line, klen))
			*why = "the key is set twice";
		else if (n == LIMITS_MAX_SETTINGS)
			*why = "too many settings";
		else
			settings[n++] = line;
		if (*why)
			return lineno;
	}
	settings[n] = NULL;
	return 0;
}

int vgpu_file_slot(const struct vgpu_config *cfg, const char *uuid)
{
	for (int i = 0; i < cfg->file_devices; i++)
		if (strcasecmp(cfg->file_uuid[i], uuid) == 0)
			return i;
	return -1;
}

/* The per-device settings into file->file_* (the others were read by
 * vgpu_config_parse_file_settings). 0, or -1 with *why set. */
static int parse_devices(struct vgpu_config *file, char *const *settings, const char **why)
{
	static char reason[256];
	bool mem_set[VGPU_MAX_DEVICES] = {false}, sm_set[VGPU_MAX_DEVICES] = {false};

	for (char *const *s = settings; *s; s++) {
		const char *uuid = device_key_uuid(*s), *eq = strchr(*s, '='), *bad = NULL;
		char name[VGPU_UUID_LEN];
		bool mem;
		int slot;

		if (uuid == NULL)
			continue;
		mem = strncmp(*s, MEM_KEY, strlen(MEM_KEY)) == 0;
		snprintf(name, sizeof(name), "%.*s", (int)(eq - uuid), uuid);
		if ((slot = vgpu_file_slot(file, name)) < 0) {
			if (file->file_devices == VGPU_MAX_DEVICES) {
				*why = "more than 16 devices";
				return -1;
			}
			slot = file->file_devices++;
			snprintf(file->file_uuid[slot], VGPU_UUID_LEN, "%s", name);
		}
		if (mem ? mem_set[slot] : sm_set[slot])
			bad = "the device is named twice (UUIDs compare without case)";
		else if (mem ? vgpu_parse_bytes(eq + 1, &file->file_mem[slot], &bad) == 0
			     : vgpu_parse_percent(eq + 1, &file->file_sm[slot], &bad) == 0)
			bad = NULL;
		if (bad) {
			snprintf(reason, sizeof(reason), "%.*s=\"%.60s\": %s", (int)(eq - *s), *s, eq + 1,
				 bad);
			*why = reason;
			return -1;
		}
		(mem ? mem_set : sm_set)[slot] = true;
	}
	return 0;
}

/* The file decides each device's limits: the environment keeps only the container's own share
 * (VGPU_CONTAINER_*), its priority if lower, and none of its region. */
static void apply_file(struct vgpu_config *cfg, const struct vgpu_config *file, bool file_region,
		       char *const *envp)
{
	struct vgpu_config own;

	vgpu_config_container_share(&own, envp); /* a bad value already failed cfg */
	memcpy(cfg->mem_limit, own.mem_limit, sizeof(cfg->mem_limit));
	memcpy(cfg->sm_limit, own.sm_limit, sizeof(cfg->sm_limit)); /* 100%: none, once settled */
	cfg->file_devices = file->file_devices;
	memcpy(cfg->file_uuid, file->file_uuid, sizeof(cfg->file_uuid));
	memcpy(cfg->file_mem, file->file_mem, sizeof(cfg->file_mem));
	memcpy(cfg->file_sm, file->file_sm, sizeof(cfg->file_sm));
	if (cfg->priority < file->priority) {
		fprintf(stderr, "libvgpu: the environment asks for a higher priority than the limits "
				"file allows; the file's applies\n");
		cfg->priority = file->priority;
	}
	if (file_region)
		memcpy(cfg->shared_cache, file->shared_cache, sizeof(cfg->shared_cache));
}

int vgpu_config_load(struct vgpu_config *cfg, char *const *envp, const char *path)
{
	char text[LIMITS_MAX_BYTES + 2], *settings[LIMITS_MAX_SETTINGS + 1];
	struct vgpu_config file;
	const char *why = NULL;
	size_t len;
	int rc = vgpu_config_parse(cfg, envp), read, line;

	if ((read = read_limits(path, text, &len, &why)) == 0)
		return rc;
	cfg->limits_file = true; /* from here on, even failed: no device is looked up by ordinal */
	if (read < 0)
		return file_fail(cfg, path, 0, why);
	if ((line = split_settings(text, len, settings, &why)) != 0)
		return file_fail(cfg, path, line, why);
	if (vgpu_config_parse_file_settings(&file, settings) < 0)
		return file_fail(cfg, path, 0, file.error);
	if (parse_devices(&file, settings, &why) < 0)
		return file_fail(cfg, path, 0, why);
	bool file_region = false;
	for (char **s = settings; *s; s++)
		file_region |= strncmp(*s, "CUDA_DEVICE_MEMORY_SHARED_CACHE=", 32) == 0;
	apply_file(cfg, &file, file_region, envp);
	vgpu_config_settle(cfg);
	return rc;
}
