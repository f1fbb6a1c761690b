// Command vgpu-k8s is one multi-call binary holding the local control plane of the e2e tier:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler (plus the kubelet, for the
// real-node tier in e2e/realnode, and kubectl, the client GitOps tests drive), built from the published
// upstream Go modules (k8s.io/kubernetes and go.etcd.io/etcd/server/v3). Linking once is much
// faster than linking four binaries on a two-core machine.
//
// Usage: vgpu-k8s <component> [flags...]
package main

import (
	"context"
	"fmt"
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream kube-apiserver

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var kubeCommands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vgpu-k8s etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl [flags...]")
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	if component == "kubectl" { // kubectl reads os.Args itself (plugins, verbosity)
		os.Args = os.Args[1:]
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	if component == "etcd" {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	}
	newCommand, ok := kubeCommands[component]
	if !ok {
		fmt.Fprintf(os.Stderr, "vgpu-k8s: unknown component %q\n", component)
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}
