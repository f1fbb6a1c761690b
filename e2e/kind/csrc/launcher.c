/* A control-plane image's command (kube-apiserver, etcd, ...): one static launcher per name that
 * runs the multi-call binary with the name it was started under as its first argument, so
 * kubeadm's static pods (`command: [kube-apiserver, ...]`) need no shell in the image. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MULTI_CALL "/usr/local/bin/vgpu-k8s"

int main(int argc, char **argv) {
    const char *slash = strrchr(argv[0], '/');
    const char *name = slash ? slash + 1 : argv[0];
    char **args = calloc((size_t)argc + 2, sizeof(char *));
    if (args == NULL) {
        perror("launcher: calloc");
        return 127;
    }
    args[0] = MULTI_CALL;
    args[1] = (char *)name;
    for (int i = 1; i < argc; i++) {
        args[i + 1] = argv[i];
    }
    execv(MULTI_CALL, args);
    perror("launcher: execv " MULTI_CALL);
    return 127;
}
