// Command vgpu-volcano is one multi-call binary holding the Volcano components the e2e tier runs:
// vc-scheduler and vc-controller-manager, built from the published volcano.sh/volcano Go module.
// Its two mains are Volcano's own cmd/scheduler and cmd/controller-manager, minus the controllers
// the e2e tier never starts (cronjob, jobflow, jobtemplate, hypernode, sharding, colocation),
// which keeps the cold build shorter. Linking once is faster than linking twice on two cores.
//
// Usage: vgpu-volcano scheduler|controller-manager [flags...]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	componentbaseoptions "k8s.io/component-base/config/options"
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	"k8s.io/klog/v2"

	controllerapp "volcano.sh/volcano/cmd/controller-manager/app"
	controlleroptions "volcano.sh/volcano/cmd/controller-manager/app/options"
	scheduler "volcano.sh/volcano/cmd/scheduler/app"
	scheduleroptions "volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/controllers/framework"
	_ "volcano.sh/volcano/pkg/controllers/garbagecollector"
	_ "volcano.sh/volcano/pkg/controllers/job"
	_ "volcano.sh/volcano/pkg/controllers/podgroup"
	_ "volcano.sh/volcano/pkg/controllers/queue"
	_ "volcano.sh/volcano/pkg/scheduler/actions"
	_ "volcano.sh/volcano/pkg/scheduler/plugins"
	_ "volcano.sh/volcano/pkg/scheduler/util/assert"
	commonutil "volcano.sh/volcano/pkg/util"
	"volcano.sh/volcano/pkg/version"
)

var logFlushFreq = pflag.Duration("log-flush-frequency", 5*time.Second, "Maximum number of seconds between log flushes")

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "scheduler" && os.Args[1] != "controller-manager") {
		fmt.Fprintln(os.Stderr, "usage: vgpu-volcano scheduler|controller-manager [flags...]")
		os.Exit(2)
	}
	component := os.Args[1]
	// cliflag.InitFlags parses os.Args[1:]: drop the component name first.
	os.Args = append([]string{"vc-" + component}, os.Args[2:]...)

	runtime.GOMAXPROCS(runtime.NumCPU())
	klog.InitFlags(nil)
	flag.Set("legacy_stderr_threshold_behavior", "false") //nolint:errcheck
	flag.Set("stderrthreshold", "INFO")                   //nolint:errcheck

	var err error
	if component == "scheduler" {
		err = runScheduler()
	} else {
		err = runControllerManager()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}

// runScheduler is volcano.sh/volcano/cmd/scheduler's main.
func runScheduler() error {
	fs := pflag.CommandLine
	s := scheduleroptions.NewServerOption()
	s.AddFlags(fs)
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	commonutil.LeaderElectionDefault(&s.LeaderElection)
	s.LeaderElection.ResourceName = commonutil.GenerateComponentName(s.SchedulerNames)
	componentbaseoptions.BindLeaderElectionFlags(&s.LeaderElection, fs)
	s.RegisterOptions()
	cliflag.InitFlags()
	if s.PrintVersion {
		version.PrintVersionAndExit()
	}
	if err := s.CheckOptionOrDie(); err != nil {
		return err
	}
	if s.CaCertFile != "" && s.CertFile != "" && s.KeyFile != "" {
		if err := s.ParseCAFiles(nil); err != nil {
			return fmt.Errorf("failed to parse CA file: %w", err)
		}
	}
	klog.StartFlushDaemon(*logFlushFreq)
	defer klog.Flush()
	return scheduler.Run(s)
}

// runControllerManager is volcano.sh/volcano/cmd/controller-manager's main.
func runControllerManager() error {
	fs := pflag.CommandLine
	s := controlleroptions.NewServerOption()
	var known []string
	framework.ForeachController(func(c framework.Controller) { known = append(known, c.Name()) })
	sort.Strings(known)
	s.AddFlags(fs, known)
	framework.ForeachController(func(c framework.Controller) {
		if fp, ok := c.(framework.FlagProvider); ok {
			fp.AddFlags(fs)
		}
	})
	utilfeature.DefaultMutableFeatureGate.AddFlag(fs)
	commonutil.LeaderElectionDefault(&s.LeaderElection)
	s.LeaderElection.ResourceName = "vc-controller-manager"
	componentbaseoptions.BindLeaderElectionFlags(&s.LeaderElection, fs)
	cliflag.InitFlags()
	if s.PrintVersion {
		version.PrintVersionAndExit()
	}
	if err := s.CheckOptionOrDie(); err != nil {
		return err
	}
	if s.CaCertFile != "" && s.CertFile != "" && s.KeyFile != "" {
		if err := s.ParseCAFiles(nil); err != nil {
			return fmt.Errorf("failed to parse CA file: %w", err)
		}
	}
	klog.StartFlushDaemon(*logFlushFreq)
	defer klog.Flush()
	return controllerapp.Run(s)
}
