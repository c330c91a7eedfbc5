package main

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

// noop answers every event with nothing to change: the upstream stub's own cost, which hack/bench sets
// beside nri-podlevel's. It implements every handler so that Configure may subscribe it to exactly the
// events the plugin under comparison takes (the stub accepts a mask only over handlers it has).
type noop struct {
	events api.EventMask
}

func (n *noop) Configure(context.Context, string, string, string) (api.EventMask, error) {
	return n.events, nil
}

func (n *noop) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (n *noop) RunPodSandbox(context.Context, *api.PodSandbox) error    { return nil }
func (n *noop) StopPodSandbox(context.Context, *api.PodSandbox) error   { return nil }
func (n *noop) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

func (n *noop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (
	*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func (n *noop) PostCreateContainer(context.Context, *api.PodSandbox, *api.Container) error { return nil }
func (n *noop) StartContainer(context.Context, *api.PodSandbox, *api.Container) error      { return nil }
func (n *noop) PostStartContainer(context.Context, *api.PodSandbox, *api.Container) error  { return nil }

func (n *noop) UpdateContainer(context.Context, *api.PodSandbox, *api.Container, *api.LinuxResources) (
	[]*api.ContainerUpdate, error) {
	return nil, nil
}

func (n *noop) PostUpdateContainer(context.Context, *api.PodSandbox, *api.Container) error { return nil }

func (n *noop) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (n *noop) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error { return nil }
