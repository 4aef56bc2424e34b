package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/optim"
	"github.com/gotrain/gotrain/tensor"
)

// resnetFixtureModel builds the model of one section of
// testdata/resnet_fixture.safetensors (see gen_resnet_fixture.py), with
// every state-dict entry set to fixtureValues.
func resnetFixtureModel(t testing.TB, kind string) *ResNetModel {
	var m *ResNetModel
	switch kind {
	case "cifar18":
		m = ResNet18(10, "cifar")
	case "imagenet18":
		m = ResNet18(10, "imagenet")
	case "bottleneck":
		m = ResNet(ResNetConfig{Block: "bottleneck", Layers: [4]int{1, 1, 1, 1}, NumClasses: 10, Stem: "imagenet"})
	default:
		t.Fatalf("unknown fixture model %q", kind)
	}
	sd := make(map[string]*tensor.Tensor)
	for _, e := range nn.StateDict(m) {
		sd[e.Name] = fixtureValues(e.Name, e.Tensor.Shape())
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		t.Fatal(err)
	}
	return m
}

// fixtureUniform returns n values in [−1, 1), gen_resnet_fixture.py's
// uniform(): splitmix64 of crc32(name)<<32 | i, top 24 bits.
func fixtureUniform(name string, n int) []float64 {
	seed := uint64(crc32.ChecksumIEEE([]byte(name))) << 32
	u := make([]float64, n)
	for i := range u {
		z := (seed | uint64(i)) + 0x9E3779B97F4A7C15
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		u[i] = float64(z>>40)/float64(1<<23) - 1
	}
	return u
}

// fixtureValues is gen_resnet_fixture.py's fixture_values(): the value of
// a state-dict entry from its name and shape. The float64 products are
// rounded separately (no fused multiply-add) as NumPy rounds them.
func fixtureValues(name string, shape []int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	u := fixtureUniform(name, n)
	leaf := name[strings.LastIndex(name, ".")+1:]
	v := make([]float32, n)
	for i, x := range u {
		var f float64
		switch {
		case leaf == "num_batches_tracked":
			f = 0
		case len(shape) == 4:
			f = float64(x * math.Sqrt(6/float64(shape[0]*shape[2]*shape[3])))
		case len(shape) == 2:
			f = float64(x / math.Sqrt(float64(shape[1])))
		case leaf == "weight":
			f = 1 + float64(0.25*x)
		case leaf == "running_var":
			f = 1 + float64(0.5*x)
		default:
			f = float64(0.1 * x)
		}
		v[i] = float32(f)
	}
	return tensor.New(v, shape...)
}

// resnetFixture is one model's section of the fixture file.
type resnetFixture map[string]*tensor.Tensor

func loadResNetFixture(t testing.TB, kind string) resnetFixture {
	t.Helper()
	entries, _, err := checkpoint.ReadTensorsFile("testdata/resnet_fixture.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	f := make(resnetFixture)
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name, kind+"/"); ok {
			f[rest] = e.Tensor
		}
	}
	if len(f) == 0 {
		t.Fatalf("fixture has no %s section", kind)
	}
	return f
}

func (f resnetFixture) get(t testing.TB, name string) *tensor.Tensor {
	t.Helper()
	v, ok := f[name]
	if !ok {
		t.Fatalf("fixture has no %q", name)
	}
	return v
}

func (f resnetFixture) targets(t testing.TB) []int {
	var out []int
	for _, v := range f.get(t, "target").Data() {
		out = append(out, int(v))
	}
	return out
}

// nearTensor is near for a reference read from the fixture file.
func nearTensor(t *testing.T, what string, got []float32, want *tensor.Tensor, rtol float64) {
	t.Helper()
	ref := testfixture.Tensor{Shape: want.Shape()}
	for _, v := range want.Data() {
		ref.Data = append(ref.Data, float64(v))
	}
	near(t, what, got, ref, rtol)
}

// TestResNetMatchesTorchvision runs torchvision's ResNet-18 (both stems)
// and a bottleneck ResNet on the fixture's weights and batch, and compares
// with PyTorch's float64 results: training-mode logits and loss, parameter
// gradients, the logits after one SGD step with momentum and weight decay
// (batch statistics again) and the running statistics that forward leaves,
// and evaluation-mode logits with those running statistics.
func TestResNetMatchesTorchvision(t *testing.T) {
	for _, kind := range []string{"cifar18", "imagenet18", "bottleneck"} {
		t.Run(kind, func(t *testing.T) {
			f := loadResNetFixture(t, kind)
			m := resnetFixtureModel(t, kind)
			x, target := f.get(t, "input"), f.targets(t)

			logits := m.Forward(x)
			loss := nn.CrossEntropy(logits, target)
			want := f.get(t, "loss").Data()[0]
			if got := loss.Item(); math.Abs(float64(got-want)) > 1e-5*math.Abs(float64(want)) {
				t.Errorf("loss %.8g, PyTorch %.8g", got, want)
			}
			nearTensor(t, "logits", logits.Data(), f.get(t, "logits"), 1e-5)
			if err := loss.Backward(); err != nil {
				t.Fatal(err)
			}
			params := nn.NamedParameters(m)
			grads := 0
			for name, w := range f {
				pname, ok := strings.CutPrefix(name, "grad.")
				if !ok {
					continue
				}
				i := slices.IndexFunc(params, func(p nn.Named) bool { return p.Name == pname })
				if i < 0 {
					t.Errorf("no parameter %s", pname)
					continue
				}
				nearTensor(t, "grad "+pname, params[i].Tensor.Grad().Data(), w, 1e-4)
				grads++
			}
			if grads < 5 {
				t.Fatalf("fixture has %d gradients", grads)
			}

			opt := optim.NewSGD(nn.Parameters(m), 0.1, optim.Momentum(0.9), optim.WeightDecay(5e-4))
			opt.Step()
			tensor.NoGrad(func() {
				nearTensor(t, "logits after a step", m.Forward(x).Data(), f.get(t, "step_logits"), 1e-4)
				sd := nn.StateDictMap(m)
				for name, w := range f {
					if bname, ok := strings.CutPrefix(name, "running."); ok {
						nearTensor(t, bname, sd[bname].Data(), w, 1e-5)
					}
				}
				nn.SetTrain(m, false)
				nearTensor(t, "eval logits", m.Forward(x).Data(), f.get(t, "eval_logits"), 1e-4)
			})
		})
	}
}

// TestResNetStateDictIsTorchvisions compares the whole state dict (names
// in order, shapes and element types) of each fixture model with the one
// torchvision gave gen_resnet_fixture.py.
func TestResNetStateDictIsTorchvisions(t *testing.T) {
	_, meta, err := checkpoint.ReadTensorsFile("testdata/resnet_fixture.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"cifar18", "imagenet18", "bottleneck"} {
		var want [][3]json.RawMessage
		if err := json.Unmarshal([]byte(meta[kind+"/state_dict"]), &want); err != nil {
			t.Fatalf("%s: fixture metadata: %v", kind, err)
		}
		var got [][3]string
		for _, e := range nn.StateDict(resnetFixtureModel(t, kind)) {
			shape, _ := json.Marshal(e.Tensor.Shape())
			if len(e.Tensor.Shape()) == 0 {
				shape = []byte("[]")
			}
			got = append(got, [3]string{e.Name, string(shape), e.Dtype.String()})
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries, torchvision %d", kind, len(got), len(want))
		}
		for i, w := range want {
			var name, dtype string
			var shape []int
			if json.Unmarshal(w[0], &name) != nil || json.Unmarshal(w[1], &shape) != nil || json.Unmarshal(w[2], &dtype) != nil {
				t.Fatalf("%s: bad metadata entry %s", kind, w)
			}
			ws, _ := json.Marshal(shape)
			if len(shape) == 0 {
				ws = []byte("[]")
			}
			if g := got[i]; g != [3]string{name, string(ws), dtype} {
				t.Errorf("%s: entry %d is %v, torchvision %s %s %s", kind, i, g, name, ws, dtype)
			}
		}
	}
}

// TestResNetStateDictNames checks the names, order and shapes of the
// state dicts against torchvision's for each block type and stem.
func TestResNetStateDictNames(t *testing.T) {
	m18 := ResNet18(1000, "imagenet")
	sd := nn.StateDict(m18)
	// torchvision resnet18: 62 parameters, 60 buffers (20 BatchNorms).
	if len(nn.Parameters(m18)) != 62 || len(sd) != 122 {
		t.Fatalf("resnet18: %d parameters, %d entries; torchvision 62, 122", len(nn.Parameters(m18)), len(sd))
	}
	wantHead := []string{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
		"bn1.num_batches_tracked", "layer1.0.conv1.weight", "layer1.0.bn1.weight"}
	for i, w := range wantHead {
		if sd[i].Name != w {
			t.Errorf("entry %d is %s, torchvision %s", i, sd[i].Name, w)
		}
	}
	if last := sd[len(sd)-1].Name; last != "fc.bias" {
		t.Errorf("last entry %s, torchvision fc.bias", last)
	}
	shapes := map[string][]int{
		"conv1.weight":                 {64, 3, 7, 7},
		"layer1.1.conv2.weight":        {64, 64, 3, 3},
		"layer2.0.conv1.weight":        {128, 64, 3, 3},
		"layer2.0.downsample.0.weight": {128, 64, 1, 1},
		"layer2.0.downsample.1.weight": {128},
		"layer4.1.bn2.running_var":     {512},
		"bn1.num_batches_tracked":      {},
		"fc.weight":                    {1000, 512},
		"fc.bias":                      {1000},
	}
	checkShapes(t, "resnet18", m18, shapes)
	for _, e := range sd {
		if strings.HasPrefix(e.Name, "layer1.") && strings.Contains(e.Name, "downsample") {
			t.Errorf("resnet18 has %s; torchvision's layer1 has no downsample", e.Name)
		}
		if want := nn.Float32; strings.HasSuffix(e.Name, "num_batches_tracked") {
			if e.Dtype != nn.Int64 {
				t.Errorf("%s is %v, want int64", e.Name, e.Dtype)
			}
		} else if e.Dtype != want {
			t.Errorf("%s is %v, want float32", e.Name, e.Dtype)
		}
	}
	checkShapes(t, "cifar resnet18", ResNet18(10, "cifar"), map[string][]int{"conv1.weight": {64, 3, 3, 3}, "fc.weight": {10, 512}})
	m34 := ResNet34(10, "imagenet")
	if n := len(nn.Parameters(m34)); n != 110 {
		t.Errorf("resnet34: %d parameters, torchvision 110", n)
	}
	checkShapes(t, "resnet34", m34, map[string][]int{"layer3.5.conv2.weight": {256, 256, 3, 3}})
	m50 := ResNet50(1000, "imagenet")
	if n := len(nn.Parameters(m50)); n != 161 {
		t.Errorf("resnet50: %d parameters, torchvision 161", n)
	}
	var total int
	for _, p := range nn.Parameters(m50) {
		total += p.Len()
	}
	if total != 25557032 { // sum(p.numel() for p in torchvision.models.resnet50().parameters())
		t.Errorf("resnet50: %d parameter values, torchvision 25557032", total)
	}
	checkShapes(t, "resnet50", m50, map[string][]int{
		"layer1.0.conv1.weight":        {64, 64, 1, 1},
		"layer1.0.conv3.weight":        {256, 64, 1, 1},
		"layer1.0.downsample.0.weight": {256, 64, 1, 1},
		"layer2.0.conv2.weight":        {128, 128, 3, 3},
		"layer3.5.bn3.weight":          {1024},
		"layer4.0.downsample.0.weight": {2048, 1024, 1, 1},
		"fc.weight":                    {1000, 2048},
	})
}

func checkShapes(t *testing.T, what string, m nn.Module, want map[string][]int) {
	t.Helper()
	sd := nn.StateDictMap(m)
	for name, s := range want {
		got, ok := sd[name]
		if !ok {
			t.Errorf("%s: no %s", what, name)
			continue
		}
		if !slices.Equal(got.Shape(), s) {
			t.Errorf("%s: %s is %v, torchvision %v", what, name, got.Shape(), s)
		}
	}
}

// TestResNetInit checks torchvision's initialisation: convolution weights
// of mean 0 and variance 2/fan_out, BatchNorm weight 1 and bias 0, fc
// within nn.Linear's bound.
func TestResNetInit(t *testing.T) {
	nn.SetSeed(3)
	m := ResNet18(10, "cifar")
	sd := nn.StateDictMap(m)
	for _, name := range []string{"layer1.0.conv1.weight", "layer3.1.conv2.weight", "layer4.0.downsample.0.weight"} {
		w := sd[name]
		s := w.Shape()
		var sum, sq float64
		for _, v := range w.Data() {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		n := float64(w.Len())
		mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
		want := 2 / float64(s[0]*s[2]*s[3])
		// n ≥ 32768 draws: the sample variance is within 5% far beyond 5σ.
		if math.Abs(variance/want-1) > 0.05 || math.Abs(mean) > 5*math.Sqrt(want/n) {
			t.Errorf("%s: mean %.3g variance %.4g, want 0 and %.4g", name, mean, variance, want)
		}
	}
	for _, v := range sd["layer2.1.bn2.weight"].Data() {
		if v != 1 {
			t.Fatalf("BatchNorm weight %v, want 1", v)
		}
	}
	for _, v := range sd["layer2.1.bn2.bias"].Data() {
		if v != 0 {
			t.Fatalf("BatchNorm bias %v, want 0", v)
		}
	}
	bound := float32(1 / math.Sqrt(512))
	for _, v := range sd["fc.weight"].Data() {
		if v < -bound || v >= bound {
			t.Fatalf("fc weight %v outside ±%v", v, bound)
		}
	}
}

// TestResNetShapes checks the output shape for each block type and stem,
// at sizes that do and do not divide by the total stride, in both modes.
func TestResNetShapes(t *testing.T) {
	for _, tc := range []struct {
		cfg  ResNetConfig
		n, h int
	}{
		{ResNetConfig{"basic", [4]int{1, 1, 1, 1}, 7, "cifar"}, 2, 16},
		{ResNetConfig{"basic", [4]int{1, 2, 1, 1}, 3, "imagenet"}, 2, 45},
		{ResNetConfig{"bottleneck", [4]int{2, 1, 1, 1}, 5, "cifar"}, 3, 9},
		{ResNetConfig{"bottleneck", [4]int{1, 1, 1, 1}, 4, "imagenet"}, 2, 33},
	} {
		m := ResNet(tc.cfg)
		x := tensor.Rand(tensor.NewRNG(1), tc.n, 3, tc.h, tc.h+3)
		for _, train := range []bool{true, false} {
			nn.SetTrain(m, train)
			y := m.Forward(x)
			if want := []int{tc.n, tc.cfg.NumClasses}; !slices.Equal(y.Shape(), want) {
				t.Errorf("%+v train=%v: output %v, want %v", tc.cfg, train, y.Shape(), want)
			}
		}
	}
}

// TestResNetBadInput checks that a wrong input and a wrong configuration
// panic with one line naming what is wrong.
func TestResNetBadInput(t *testing.T) {
	m := ResNet18(10, "cifar")
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"one channel", func() { m.Forward(tensor.Zeros(2, 1, 32, 32)) }, "models: ResNet: input [2 1 32 32] is not a batch of 3-channel images [N, 3, H, W]"},
		{"unbatched", func() { m.Forward(tensor.Zeros(3, 32, 32)) }, "models: ResNet: input [3 32 32] is not a batch"},
		{"single 8x8 image in training", func() { m.Forward(tensor.Zeros(1, 3, 8, 8)) }, "models: ResNet: input [1 3 8 8] leaves 1x1 feature maps per image after the last stage; training needs"},
		{"block", func() { ResNet(ResNetConfig{Block: "wide", Layers: [4]int{1, 1, 1, 1}, NumClasses: 2, Stem: "cifar"}) }, `models: ResNet: block "wide" is not "basic" or "bottleneck"`},
		{"stem", func() { ResNet18(10, "mnist") }, `models: ResNet: stem "mnist" is not "imagenet" or "cifar"`},
		{"layers", func() { ResNet(ResNetConfig{Block: "basic", Layers: [4]int{2, 0, 2, 2}, NumClasses: 2, Stem: "cifar"}) }, "models: ResNet: layers [2 0 2 2]: stage 2 has 0 blocks"},
		{"classes", func() { ResNet18(0, "cifar") }, "models: ResNet: num classes 0 must be positive"},
	} {
		msg := panicMessage(tc.f)
		if !strings.HasPrefix(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: panic %q, want one line starting %q", tc.name, msg, tc.want)
		}
	}
	// The same single image is fine in eval mode, as in PyTorch.
	nn.SetTrain(m, false)
	if y := m.Forward(tensor.Zeros(1, 3, 8, 8)); !slices.Equal(y.Shape(), []int{1, 10}) {
		t.Errorf("eval output %v", y.Shape())
	}
}

func panicMessage(f func()) (msg string) {
	defer func() { msg = fmt.Sprint(recover()) }()
	f()
	return "no panic"
}

// resnetCheckpoint is an entry of testdata/resnet_checkpoints.json: what
// gen_resnet_fixture.py --check needs to load gotrain's checkpoint into
// torchvision and compare the logits.
type resnetCheckpoint struct {
	File       string    `json:"file"`
	SHA256     string    `json:"sha256"`
	InputShape []int     `json:"input_shape"`
	Input      []float32 `json:"input"`
	Logits     []float64 `json:"logits"`
}

// TestResNetCheckpointForTorch checks that the safetensors checkpoints
// gotrain writes for its ResNet-18s (weights and running statistics from
// the fixture's formula, a batch counter of 3) are byte for byte those
// whose sha256 testdata/resnet_checkpoints.json records, and whose
// evaluation logits it records too: `gen_resnet_fixture.py --check DIR`
// loads those files (45 MB each, so not committed; -update writes them to
// DIR and prints it) into torchvision with load_state_dict(strict=True)
// and compares. The test also reloads each file into a fresh model.
func TestResNetCheckpointForTorch(t *testing.T) {
	const jsonPath = "testdata/resnet_checkpoints.json"
	got := make(map[string]resnetCheckpoint)
	dir := ""
	if *update {
		var err error
		if dir, err = os.MkdirTemp("", "gotrain-resnet-"); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{"cifar18", "imagenet18"} {
		m := resnetFixtureModel(t, kind)
		for _, e := range nn.NamedBuffers(m) {
			if strings.HasSuffix(e.Name, "num_batches_tracked") {
				e.Tensor.Data()[0] = 3
			}
		}
		nn.SetTrain(m, false)
		shape := []int{2, 3, 24, 24}
		x := tensor.New(fixtureValues(kind+".check_input", shape).Data(), shape...)
		logits := m.Forward(x)
		var buf bytes.Buffer
		if err := checkpoint.WriteModel(&buf, m); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf.Bytes())
		c := resnetCheckpoint{File: "gotrain_resnet_" + kind + ".safetensors", SHA256: hex.EncodeToString(sum[:]),
			InputShape: shape, Input: x.Data()}
		for _, v := range logits.Data() {
			c.Logits = append(c.Logits, float64(v))
		}
		got[kind] = c
		path := filepath.Join(t.TempDir(), c.File)
		if dir != "" {
			path = filepath.Join(dir, c.File)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		fresh := resnetFixtureModel(t, kind)
		if err := checkpoint.Load(path, fresh); err != nil {
			t.Fatal(err)
		}
		nn.SetTrain(fresh, false)
		if d := fresh.Forward(x).Data(); !slices.Equal(d, logits.Data()) {
			t.Errorf("%s: the reloaded model's logits differ", kind)
		}
		if v := nn.StateDictMap(fresh)["layer3.1.bn1.num_batches_tracked"].Item(); v != 3 {
			t.Errorf("%s: reloaded num_batches_tracked %v, want 3", kind, v)
		}
	}
	if *update {
		js, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jsonPath, js, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and the checkpoints in %s; run gen_resnet_fixture.py --check %s", jsonPath, dir, dir)
		return
	}
	want := testfixtureLoad[map[string]resnetCheckpoint](t, jsonPath)
	for kind, c := range got {
		w, ok := (*want)[kind]
		if !ok {
			t.Fatalf("%s has no %s", jsonPath, kind)
		}
		if c.SHA256 != w.SHA256 {
			t.Errorf("%s: the checkpoint written has sha256 %s, %s records %s (run with -update if the format changed on purpose, then check it in torchvision)", kind, c.SHA256, jsonPath, w.SHA256)
		}
		for i, v := range c.Logits {
			if math.Abs(v-w.Logits[i]) > 1e-5*max(1, math.Abs(w.Logits[i])) {
				t.Fatalf("%s: logit %d = %v, recorded %v", kind, i, v, w.Logits[i])
			}
		}
	}
}

// TestResNetHooksSeeIntactTensors checks that forward hooks on the layers
// inside a block run, and that the tensors they see are left alone by
// the recycling of intermediate results: after Backward they still hold
// the values the hooks saw.
func TestResNetHooksSeeIntactTensors(t *testing.T) {
	m := ResNet18(10, "cifar")
	blk := m.stages[0][0].(*BasicBlock)
	var seen hookSnapshots
	defer nn.RegisterForwardHook(blk.bn1, seen.save)()
	defer nn.RegisterForwardHook(blk.conv2, seen.save)()
	x := tensor.Rand(tensor.NewRNG(4), 2, 3, 8, 8)
	if err := nn.CrossEntropy(m.Forward(x), []int{1, 2}).Backward(); err != nil {
		t.Fatal(err)
	}
	seen.check(t, 2)
}

// hookSnapshots records, as a forward hook, the tensors the hooked layers
// see with a copy of their values, to check later that nothing recycled
// them.
type hookSnapshots struct {
	seen   []*tensor.Tensor
	copies [][]float32
}

func (h *hookSnapshots) save(_ nn.Module, x, y *tensor.Tensor) {
	for _, v := range []*tensor.Tensor{x, y} {
		h.seen = append(h.seen, v)
		h.copies = append(h.copies, slices.Clone(v.Data()))
	}
}

// check fails t unless the hooks ran calls times and every tensor they
// saw still holds the values it had then.
func (h *hookSnapshots) check(t *testing.T, calls int) {
	t.Helper()
	if len(h.seen) != 2*calls {
		t.Fatalf("the hooks ran %d times, want %d", len(h.seen)/2, calls)
	}
	for i, v := range h.seen {
		if !slices.Equal(v.Data(), h.copies[i]) {
			t.Errorf("tensor %d a hook saw changed after Backward (%d values, had %d)", i, v.Len(), len(h.copies[i]))
		}
	}
}
