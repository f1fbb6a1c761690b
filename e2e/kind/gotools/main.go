// Command vgpu-kind-k8s is one multi-call binary holding the Kubernetes tools a kind node image
// needs besides what the control plane's vgpu-k8s already has: kubeadm, kubectl and kube-proxy,
// built from the published k8s.io/kubernetes module at the same release (so Go's build cache
// shares every package the two binaries have in common). It picks the tool by the name it was
// started under (a symlink per tool), so each tool sees its own arguments unchanged.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "kubeadm":
		kubeadmerrors.HandleError(kubeadm.Run())
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	default:
		fmt.Fprintf(os.Stderr, "vgpu-kind-k8s: started as %q; link it as kubeadm, kubectl or kube-proxy\n", name)
		os.Exit(2)
	}
}
