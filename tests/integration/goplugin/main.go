// Command goplugin is a second, independent NRI plugin for the integration tests. It is built on the
// upstream Go stub (github.com/containerd/nri/pkg/stub) so the tests can prove that nri-podlevel and a
// plugin written against the reference library share one runtime without disturbing each other.
//
// Every event it handles is appended to the -events file as one JSON object per line, written with a
// single write(2) on an O_APPEND descriptor so a reader polling the file never sees half a record.
// With -env or -annotation it adjusts each container it is asked to create, fields nri-podlevel never
// sets. -cpus makes it pin containers too, which collides with nri-podlevel on purpose: the runtime
// rejects a container when two plugins adjust the same field, and a test needs to see that happen.
//
// With -noop EVENTS it is instead a plugin that changes nothing, subscribed to EVENTS (names as NRI's
// ParseEventMask takes them, "CreateContainer,StopContainer"), writes no events file and exits 0 when
// the runtime closes the connection: the baseline hack/bench compares nri-podlevel with.
//
// Exit status: 0 after SIGTERM/SIGINT, 1 when the runtime closes the connection or it cannot connect,
// 2 on bad flags. A test can therefore tell "still registered" from "dropped by the runtime".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// nriLibrary names the Debian package the stub was compiled from; hack/build-go-nri-plugin sets it.
var nriLibrary = "unknown"

// record is one line of the events file. Fields that do not apply to an event are left out.
type record struct {
	Event      string      `json:"event"`
	Runtime    string      `json:"runtime,omitempty"`
	Version    string      `json:"version,omitempty"`
	Library    string      `json:"library,omitempty"`
	Pods       *int        `json:"pods,omitempty"`
	Containers *int        `json:"containers,omitempty"`
	Pod        string      `json:"pod,omitempty"`
	PodUID     string      `json:"pod_uid,omitempty"`
	Container  string      `json:"container,omitempty"`
	Resources  *cpuRecord  `json:"resources,omitempty"`
	Adjusted   *adjustment `json:"adjusted,omitempty"`
}

// cpuRecord is what the runtime asked for before any plugin adjusted the container.
type cpuRecord struct {
	Cpus   string `json:"cpus"`
	Shares uint64 `json:"shares"`
	Quota  int64  `json:"quota"`
}

// adjustment is what this plugin asked the runtime to change.
type adjustment struct {
	Cpus        string            `json:"cpus,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// journal serialises records onto the events file.
type journal struct {
	mu   sync.Mutex
	file *os.File
}

func (j *journal) write(r record) {
	line, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: cannot encode %s record: %v\n", r.Event, err)
		os.Exit(1)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.file.Write(append(line, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: cannot append to %s: %v\n", j.file.Name(), err)
		os.Exit(1)
	}
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

func (kv keyValues) String() string {
	pairs := make([]string, 0, len(kv))
	for k, v := range kv {
		pairs = append(pairs, k+"="+v)
	}
	return strings.Join(pairs, ",")
}

func (kv keyValues) Set(s string) error {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	kv[key] = value
	return nil
}

// plugin implements exactly the events it records; the stub subscribes it to those and no others.
type plugin struct {
	journal     *journal
	env         keyValues
	annotations keyValues
	cpus        string
}

func (p *plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.journal.write(record{Event: "Configure", Runtime: runtime, Version: version, Library: nriLibrary})
	return 0, nil
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) (
	[]*api.ContainerUpdate, error) {
	nPods, nCtrs := len(pods), len(ctrs)
	p.journal.write(record{Event: "Synchronize", Pods: &nPods, Containers: &nCtrs})
	return nil, nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.journal.write(record{Event: "RunPodSandbox", Pod: pod.GetName(), PodUID: pod.GetUid()})
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (
	*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	cpu := ctr.GetLinux().GetResources().GetCpu()
	rec := containerRecord("CreateContainer", pod, ctr)
	rec.Resources = &cpuRecord{
		Cpus:   cpu.GetCpus(),
		Shares: cpu.GetShares().GetValue(),
		Quota:  cpu.GetQuota().GetValue(),
	}
	adjust := &api.ContainerAdjustment{}
	for k, v := range p.env {
		adjust.AddEnv(k, v)
	}
	for k, v := range p.annotations {
		adjust.AddAnnotation(k, v)
	}
	if p.cpus != "" {
		adjust.SetLinuxCPUSetCPUs(p.cpus)
	}
	if len(p.env)+len(p.annotations) > 0 || p.cpus != "" {
		rec.Adjusted = &adjustment{Cpus: p.cpus, Env: p.env, Annotations: p.annotations}
	}
	p.journal.write(rec)
	return adjust, nil, nil
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.journal.write(containerRecord("StartContainer", pod, ctr))
	return nil
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (
	[]*api.ContainerUpdate, error) {
	p.journal.write(containerRecord("StopContainer", pod, ctr))
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.journal.write(containerRecord("RemoveContainer", pod, ctr))
	return nil
}

func containerRecord(event string, pod *api.PodSandbox, ctr *api.Container) record {
	return record{Event: event, Pod: pod.GetName(), PodUID: pod.GetUid(), Container: ctr.GetName()}
}

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "NRI socket of the runtime")
	name := flag.String("name", "goplugin", "plugin name to register")
	index := flag.String("index", "10", "plugin index (two digits); orders plugins within the runtime")
	events := flag.String("events", "", "file to append one JSON line per event to (required)")
	p := &plugin{env: keyValues{}, annotations: keyValues{}}
	flag.Var(p.env, "env", "KEY=VALUE environment variable to add to every created container (repeatable)")
	flag.Var(p.annotations, "annotation", "KEY=VALUE annotation to add to every created container (repeatable)")
	flag.StringVar(&p.cpus, "cpus", "", "cpuset (Linux list) to pin every created container to")
	noopEvents := flag.String("noop", "", "change nothing, subscribed to these events; no events file")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(),
			"usage: %s (-events FILE | -noop EVENTS) [flags]\nNRI plugin on the upstream Go stub (%s).\n", os.Args[0], nriLibrary)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || (*events == "") == (*noopEvents == "") {
		flag.Usage()
		os.Exit(2)
	}
	if *noopEvents != "" {
		runNoop(*noopEvents, *name, *index, *socket)
	}

	file, err := os.OpenFile(*events, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: cannot open events file: %v\n", err)
		os.Exit(2)
	}
	p.journal = &journal{file: file}

	s, err := stub.New(p,
		stub.WithPluginName(*name),
		stub.WithPluginIdx(*index),
		stub.WithSocketPath(*socket),
		stub.WithOnClose(func() {
			p.journal.write(record{Event: "Closed"})
			fmt.Fprintln(os.Stderr, "goplugin: the runtime closed the NRI connection")
			os.Exit(1)
		}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: cannot create NRI stub: %v\n", err)
		os.Exit(2)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		p.journal.write(record{Event: "Stopped"})
		os.Exit(0)
	}()

	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: %s-%s on %s: %v\n", *index, *name, *socket, err)
		os.Exit(1)
	}
}

// runNoop serves as the no-op plugin until the runtime closes the connection, then exits 0.
func runNoop(events, name, index, socket string) {
	mask, err := api.ParseEventMask(events)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: -noop: %v\n", err)
		os.Exit(2)
	}
	opts := []stub.Option{stub.WithOnClose(func() { os.Exit(0) })}
	// A plugin the runtime launched takes its name, index and socket from the runtime.
	if os.Getenv(api.PluginSocketEnvVar) == "" {
		opts = append(opts, stub.WithPluginName(name), stub.WithPluginIdx(index), stub.WithSocketPath(socket))
	}
	s, err := stub.New(&noop{events: mask}, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: cannot create NRI stub: %v\n", err)
		os.Exit(2)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "goplugin: %s-%s: %v\n", index, name, err)
		os.Exit(1)
	}
	os.Exit(0)
}
