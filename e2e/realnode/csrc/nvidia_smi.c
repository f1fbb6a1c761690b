/* The stand-in driver root's nvidia-smi (e2e/realnode/driver_root.py): what a claimed container
 * runs as /usr/bin/nvidia-smi, mounted from the driver root by the claim's CDI spec. Like the real
 * tool it is not linked against NVML: it dlopens "libnvidia-ml.so.1" by its SONAME, so the
 * container's loader must find the library the same spec mounted on its default search path.
 * It prints, one "key=value" a line:
 *   smi.library=PATH   the file the loader opened for libnvidia-ml.so.1 (its link map name)
 *   smi.count=N        nvmlDeviceGetCount_v2
 *   smi.uuid=GPU-...   each device's UUID, in NVML index order
 *   smi.error=TEXT     the step that failed (then exit status 1) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>

typedef int (*init_fn)(void);
typedef int (*count_fn)(unsigned int *);
typedef int (*handle_fn)(unsigned int, void **);
typedef int (*uuid_fn)(void *, char *, unsigned int);

static int fail(const char *what) {
    printf("smi.error=%s\n", what);
    fflush(stdout);
    return 1;
}

int main(void) {
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    struct link_map *map = NULL;
    if (nvml == NULL) {
        return fail(dlerror());
    }
    if (dlinfo(nvml, RTLD_DI_LINKMAP, &map) == 0 && map != NULL) {
        printf("smi.library=%s\n", map->l_name);
    }
    init_fn init = (init_fn)dlsym(nvml, "nvmlInit_v2");
    count_fn count = (count_fn)dlsym(nvml, "nvmlDeviceGetCount_v2");
    handle_fn handle = (handle_fn)dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2");
    uuid_fn uuid = (uuid_fn)dlsym(nvml, "nvmlDeviceGetUUID");
    unsigned int devices = 0;
    if (init == NULL || count == NULL || handle == NULL || uuid == NULL) {
        return fail("a symbol of NVML is missing");
    }
    if (init() != 0 || count(&devices) != 0) {
        return fail("nvmlInit_v2 or nvmlDeviceGetCount_v2");
    }
    printf("smi.count=%u\n", devices);
    for (unsigned int i = 0; i < devices; i++) {
        void *device = NULL;
        char text[96] = "";
        if (handle(i, &device) != 0 || uuid(device, text, sizeof text) != 0) {
            return fail("nvmlDeviceGetHandleByIndex_v2 or nvmlDeviceGetUUID");
        }
        printf("smi.uuid=%s\n", text);
    }
    fflush(stdout);
    return 0;
}
