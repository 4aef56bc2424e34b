package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The parts of the Kubernetes and Kubeflow API schemas the manifests in
// examples/kubernetes use; decoding refuses any other field, so a typo
// ("replica", "containerport") fails here rather than in a cluster.
type (
	objectMeta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
	envVar struct {
		Name      string `json:"name"`
		Value     string `json:"value,omitempty"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `json:"name"`
				Key  string `json:"key"`
			} `json:"secretKeyRef,omitempty"`
			ResourceFieldRef *struct {
				Resource string `json:"resource"`
			} `json:"resourceFieldRef,omitempty"`
		} `json:"valueFrom,omitempty"`
	}
	resources struct {
		Limits   map[string]string `json:"limits,omitempty"`
		Requests map[string]string `json:"requests,omitempty"`
	}
	container struct {
		Name      string    `json:"name"`
		Image     string    `json:"image"`
		Command   []string  `json:"command,omitempty"`
		Args      []string  `json:"args,omitempty"`
		Env       []envVar  `json:"env,omitempty"`
		Resources resources `json:"resources"`
		Ports     []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports,omitempty"`
	}
	replicaSpec struct {
		Replicas      int    `json:"replicas"`
		RestartPolicy string `json:"restartPolicy"`
		Template      struct {
			Spec struct {
				Containers []container `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	}
	pyTorchJob struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Metadata   objectMeta `json:"metadata"`
		Spec       struct {
			PyTorchReplicaSpecs map[string]*replicaSpec `json:"pytorchReplicaSpecs"`
			NprocPerNode        *string                 `json:"nprocPerNode,omitempty"`
		} `json:"spec"`
	}
	trainJob struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Metadata   objectMeta `json:"metadata"`
		Spec       struct {
			RuntimeRef struct {
				Name string `json:"name"`
			} `json:"runtimeRef"`
			Trainer struct {
				Image            string    `json:"image"`
				Command          []string  `json:"command"`
				Args             []string  `json:"args,omitempty"`
				NumNodes         int       `json:"numNodes"`
				NumProcPerNode   any       `json:"numProcPerNode"` // int or "auto"/"cpu"
				ResourcesPerNode resources `json:"resourcesPerNode"`
				Env              []envVar  `json:"env,omitempty"`
			} `json:"trainer"`
		} `json:"spec"`
	}
)

// decodeStrict decodes a manifest, refusing unknown fields.
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// checkContainer checks what the API server and the kubelet require of a
// container, and that the program is the one the image holds.
func checkContainer(t *testing.T, where string, c container, env []envVar) {
	t.Helper()
	if c.Image == "" || len(c.Command) == 0 || c.Command[0] != "/mnist-example" {
		t.Errorf("%s: image %q command %v: want an image and /mnist-example", where, c.Image, c.Command)
	}
	for _, e := range env {
		n := 0
		if e.Value != "" {
			n++
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			n++
		}
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			n++
		}
		if e.Name == "" || n != 1 {
			t.Errorf("%s: env %+v: want a name and exactly one value source", where, e)
		}
		switch e.Name {
		case "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT":
			t.Errorf("%s: env sets %s, which the operator sets", where, e.Name)
		}
	}
}

func TestKubernetesManifests(t *testing.T) {
	var pj pyTorchJob
	decodeStrict(t, "../kubernetes/pytorchjob.json", &pj)
	if pj.APIVersion != "kubeflow.org/v1" || pj.Kind != "PyTorchJob" || pj.Metadata.Name == "" {
		t.Errorf("pytorchjob.json: %s %s %q", pj.APIVersion, pj.Kind, pj.Metadata.Name)
	}
	for role, rs := range pj.Spec.PyTorchReplicaSpecs {
		where := "pytorchjob.json " + role
		if role != "Master" && role != "Worker" {
			t.Errorf("%s: replica type must be Master or Worker", where)
			continue
		}
		if rs.Replicas < 1 || (role == "Master" && rs.Replicas != 1) {
			t.Errorf("%s: %d replicas", where, rs.Replicas)
		}
		if cs := rs.Template.Spec.Containers; len(cs) != 1 || cs[0].Name != "pytorch" {
			t.Errorf("%s: want one container named pytorch (the operator sets its env), got %+v", where, cs)
			continue
		}
		checkContainer(t, where, rs.Template.Spec.Containers[0], rs.Template.Spec.Containers[0].Env)
	}
	if _, err := v1MasterPort(pj); err != nil {
		t.Error(err)
	}
	var tj trainJob
	decodeStrict(t, "../kubernetes/trainjob.json", &tj)
	tr := tj.Spec.Trainer
	if tj.APIVersion != "trainer.kubeflow.org/v1alpha1" || tj.Kind != "TrainJob" || tj.Metadata.Name == "" || tj.Spec.RuntimeRef.Name == "" || tr.NumNodes < 1 {
		t.Errorf("trainjob.json: %s %s %q runtime %q nodes %d", tj.APIVersion, tj.Kind, tj.Metadata.Name, tj.Spec.RuntimeRef.Name, tr.NumNodes)
	}
	if n, ok := tr.NumProcPerNode.(float64); !ok || n != 1 {
		t.Errorf("trainjob.json: numProcPerNode %v: the program runs directly, so one process per node", tr.NumProcPerNode)
	}
	checkContainer(t, "trainjob.json", container{Image: tr.Image, Command: tr.Command}, tr.Env)
}

// v1MasterPort is the port of the Master's pytorchjob-port, as the
// operator finds it.
func v1MasterPort(pj pyTorchJob) (int, error) {
	m := pj.Spec.PyTorchReplicaSpecs["Master"]
	if m != nil {
		for _, c := range m.Template.Spec.Containers {
			for _, p := range c.Ports {
				if c.Name == "pytorch" && p.Name == "pytorchjob-port" {
					return p.ContainerPort, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("pytorchjob.json: the Master has no container port named pytorchjob-port, which the operator requires")
}

// podEnv resolves a container's own env as the kubelet would here: the
// secret is a test token, limits.cpu one CPU (two pods share 2 cores).
func podEnv(env []envVar) []string {
	var out []string
	for _, e := range env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			out = append(out, e.Name+"=kube-test-token")
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			out = append(out, e.Name+"=1")
		default:
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}

// runPods runs one process per pod with exactly the given environments
// (plus the test binary's worker switch) and returns pod 0's stdout.
func runPods(t *testing.T, envs [][]string, args []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	exe := testBinary(t)
	cmds := make([]*exec.Cmd, len(envs))
	outs := make([]bytes.Buffer, len(envs))
	errs := make([]bytes.Buffer, len(envs))
	for i, env := range envs {
		cmds[i] = exec.CommandContext(ctx, exe, args...)
		// A pod's environment: the operator's variables, the container's,
		// and Kubernetes' own; nothing from this machine.
		cmds[i].Env = append([]string{"GOTRAIN_TEST_WORKER=main", "HOSTNAME=pod-" + strconv.Itoa(i),
			"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"}, env...)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		cmds[i].WaitDelay = 5 * time.Second
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Go(func() { c.Wait() })
	}
	wg.Wait()
	for i, c := range cmds {
		if !c.ProcessState.Success() {
			t.Fatalf("pod %d: %v\nenv: %v\nstderr:\n%s", i, c.ProcessState, envs[i], errs[i].String())
		}
	}
	return outs[0].String()
}

// The environment the training operator's setPodEnv and
// MasterEnvVarGenerator give each pod of the PyTorchJob (with the PET_
// variables of its newer releases; the older set only PYTHONUNBUFFERED,
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, which TestDetect covers),
// replayed onto real worker processes. The pods' DNS names resolve to nothing here:
// MASTER_ADDR is the master pod's name swapped for loopback, with
// GOTRAIN_ALLOW_LOOPBACK=1 as every "node" is this host.
func TestKubeflowPyTorchJobReplay(t *testing.T) {
	var pj pyTorchJob
	decodeStrict(t, "../kubernetes/pytorchjob.json", &pj)
	if _, err := v1MasterPort(pj); err != nil {
		t.Fatal(err)
	}
	// The manifest's port is each pod's own; on one host take a free one.
	masterPort := freePort(t)
	total := 0
	for _, rs := range pj.Spec.PyTorchReplicaSpecs {
		total += rs.Replicas
	}
	nproc := "1"
	if pj.Spec.NprocPerNode != nil {
		nproc = *pj.Spec.NprocPerNode
	}
	var envs [][]string
	var args []string
	for _, role := range []string{"Master", "Worker"} {
		rs := pj.Spec.PyTorchReplicaSpecs[role]
		for index := range rs.Replicas {
			rank := index
			if role == "Worker" {
				rank++ // the Master is rank 0
			}
			c := rs.Template.Spec.Containers[0]
			env := append(podEnv(c.Env),
				"PYTHONUNBUFFERED=0",
				"MASTER_PORT="+masterPort, "MASTER_ADDR=127.0.0.1", // gotrain-mnist-master-0
				"PET_MASTER_PORT="+masterPort, "PET_MASTER_ADDR=127.0.0.1",
				"WORLD_SIZE="+strconv.Itoa(total), "RANK="+strconv.Itoa(rank),
				"PET_NPROC_PER_NODE="+nproc, "PET_NODE_RANK="+strconv.Itoa(rank), "PET_NNODES="+strconv.Itoa(total),
				"GOTRAIN_ALLOW_LOOPBACK=1")
			envs = append(envs, env)
			args = append(c.Command[1:len(c.Command):len(c.Command)], "--max-steps", "30")
		}
	}
	checkSummary(t, runPods(t, envs, args), strconv.Itoa(total))
}

// The environment trainer v2's Torch plugin gives each node of the
// TrainJob (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the job
// completion index, PET_MASTER_ADDR <job>-node-0-0.<job>, PET_MASTER_PORT
// 29400), replayed onto real worker processes with the master's name
// swapped for loopback and a free port.
func TestKubeflowTrainJobReplay(t *testing.T) {
	var tj trainJob
	decodeStrict(t, "../kubernetes/trainjob.json", &tj)
	tr := tj.Spec.Trainer
	masterPort := freePort(t)
	var envs [][]string
	for node := range tr.NumNodes {
		env := append(podEnv(tr.Env),
			"PET_NNODES="+strconv.Itoa(tr.NumNodes), "PET_NPROC_PER_NODE="+fmt.Sprint(tr.NumProcPerNode),
			"PET_NODE_RANK="+strconv.Itoa(node),
			"PET_MASTER_ADDR=127.0.0.1", // gotrain-mnist-node-0-0.gotrain-mnist
			"PET_MASTER_PORT="+masterPort,
			"JOB_COMPLETION_INDEX="+strconv.Itoa(node),
			"GOTRAIN_ALLOW_LOOPBACK=1")
		envs = append(envs, env)
	}
	args := append(append(tr.Command[1:len(tr.Command):len(tr.Command)], tr.Args...), "--max-steps", "30")
	out := runPods(t, envs, args)
	checkSummary(t, out, strconv.Itoa(tr.NumNodes))
	if !strings.Contains(out, "world="+strconv.Itoa(tr.NumNodes)) {
		t.Fatal(out)
	}
}
