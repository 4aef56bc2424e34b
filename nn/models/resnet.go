package models

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/nn"
	"github.com/gotrain/gotrain/tensor"
)

// ResNetConfig describes a residual network of torchvision's family.
type ResNetConfig struct {
	// Block is "basic" (two 3×3 convolutions, expansion 1: ResNet-18 and
	// -34) or "bottleneck" (1×1, 3×3, 1×1, expansion 4: ResNet-50 and
	// deeper; the stride on the 3×3 convolution, torchvision's "v1.5").
	Block string
	// Layers is the number of blocks in each of the four stages.
	Layers [4]int
	// NumClasses is the width of the final Linear layer.
	NumClasses int
	// Stem is "imagenet" (torchvision's: conv1 7×7 stride 2 padding 3,
	// bn1, ReLU, max pooling 3×3 stride 2 padding 1) or "cifar" (conv1
	// 3×3 stride 1 padding 1, bn1, ReLU and no max pooling, the usual
	// network for 32×32 images).
	Stem string
}

// ResNetModel is torchvision's ResNet (torchvision.models.ResNet) with its
// state dict names: conv1.weight; bn1.{weight, bias, running_mean,
// running_var, num_batches_tracked}; layerS.B.convK.weight and
// layerS.B.bnK.* for stage S = 1..4, block B and convolution K;
// layerS.0.downsample.0.weight and layerS.0.downsample.1.* where a block
// changes the shape; fc.weight and fc.bias. Convolutions have no bias.
//
// A model with the "imagenet" stem loads into torchvision's model of the
// same configuration (torchvision.models.resnet18() and so on) with
// load_state_dict(strict=True), and the other way round. With the "cifar"
// stem it loads into the same torchvision model after
//
//	model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
//	model.maxpool = nn.Identity()
//
// Forward takes [N, 3, H, W] images and returns [N, NumClasses] logits. Its
// BatchNorm layers follow nn.SetTrain (batch statistics in training,
// running statistics in eval), and ddp.ConvertSyncBatchNorm finds them.
// Blocks and layers run through nn.Call, so forward hooks on them run,
// except that a BatchNorm layer without hooks runs as one op with the
// ReLU (and the residual addition) after it, BatchNormLayer.ForwardReLU,
// whose results are the separate ops' bit for bit; the intermediate
// results that no hook sees go back to package tensor's
// buffer pool once Backward is done with them.
type ResNetModel struct {
	nn.Base
	// Config is the configuration the model was built with.
	Config  ResNetConfig
	conv1   *nn.Conv2dLayer
	bn1     *nn.BatchNormLayer
	maxpool *nn.Pool2dLayer // nil for the "cifar" stem
	stages  [4][]resBlock
	fc      *nn.LinearLayer
	// strides lists the stride-2 steps from the input to the last
	// stage, each halving the height and width (rounding up).
	strides []int
}

// resBlock is a BasicBlock or a Bottleneck.
type resBlock interface {
	nn.Module
	// inputReaders lists the block and the layers in it whose forward
	// hooks see the block's input: the first convolution and the
	// projection shortcut, if any.
	inputReaders() []nn.Module
}

// ResNet returns the network cfg describes, initialised as torchvision
// initialises it: convolutions kaiming_normal_ (fan_out, ReLU gain),
// BatchNorm weight 1 and bias 0, fc as nn.Linear's default; the last
// BatchNorm of each block is not zeroed (zero_init_residual=False). The
// weights come from the generator nn.SetSeed controls, in construction
// order. It panics if cfg is not valid.
func ResNet(cfg ResNetConfig) *ResNetModel {
	if err := cfg.validate(); err != nil {
		panic("models: ResNet: " + err.Error())
	}
	m := &ResNetModel{Config: cfg}
	if cfg.Stem == "imagenet" {
		m.conv1 = nn.Conv2d(3, 64, 7, nn.Stride(2), nn.Padding(3), nn.NoBias())
		m.strides = append(m.strides, 2)
	} else {
		m.conv1 = nn.Conv2d(3, 64, 3, nn.Stride(1), nn.Padding(1), nn.NoBias())
	}
	m.Register("conv1", m.conv1)
	m.bn1 = nn.BatchNorm2d(64)
	m.Register("bn1", m.bn1)
	if cfg.Stem == "imagenet" {
		// torchvision registers relu and maxpool here; neither has state.
		m.maxpool = nn.MaxPool2d(3, nn.Stride(2), nn.Padding(1))
		m.strides = append(m.strides, 2)
	}
	expansion := 1
	if cfg.Block == "bottleneck" {
		expansion = 4
	}
	in := 64
	for s := range 4 {
		planes := 64 << s
		stride := 1
		if s > 0 {
			stride = 2
			m.strides = append(m.strides, 2)
		}
		stage := nn.Sequential()
		for b := range cfg.Layers[s] {
			bs := 1
			if b == 0 {
				bs = stride
			}
			var blk resBlock
			if cfg.Block == "basic" {
				blk = newBasicBlock(in, planes, bs)
			} else {
				blk = newBottleneck(in, planes, bs)
			}
			stage.Append(blk)
			m.stages[s] = append(m.stages[s], blk)
			in = planes * expansion
		}
		m.Register(fmt.Sprintf("layer%d", s+1), stage)
	}
	m.fc = nn.Linear(512*expansion, cfg.NumClasses)
	m.Register("fc", m.fc)
	nn.WithInitRNG(m.initConvs)
	return m
}

// ResNet18 returns ResNet(ResNetConfig{"basic", [2 2 2 2], numClasses,
// stem}), torchvision's resnet18 for stem "imagenet".
func ResNet18(numClasses int, stem string) *ResNetModel {
	return ResNet(ResNetConfig{Block: "basic", Layers: [4]int{2, 2, 2, 2}, NumClasses: numClasses, Stem: stem})
}

// ResNet34 returns ResNet(ResNetConfig{"basic", [3 4 6 3], numClasses,
// stem}), torchvision's resnet34 for stem "imagenet".
func ResNet34(numClasses int, stem string) *ResNetModel {
	return ResNet(ResNetConfig{Block: "basic", Layers: [4]int{3, 4, 6, 3}, NumClasses: numClasses, Stem: stem})
}

// ResNet50 returns ResNet(ResNetConfig{"bottleneck", [3 4 6 3],
// numClasses, stem}), torchvision's resnet50 for stem "imagenet".
func ResNet50(numClasses int, stem string) *ResNetModel {
	return ResNet(ResNetConfig{Block: "bottleneck", Layers: [4]int{3, 4, 6, 3}, NumClasses: numClasses, Stem: stem})
}

// validate reports the first thing wrong with cfg.
func (cfg ResNetConfig) validate() error {
	if cfg.Block != "basic" && cfg.Block != "bottleneck" {
		return fmt.Errorf("block %q is not \"basic\" or \"bottleneck\"", cfg.Block)
	}
	if cfg.Stem != "imagenet" && cfg.Stem != "cifar" {
		return fmt.Errorf("stem %q is not \"imagenet\" or \"cifar\"", cfg.Stem)
	}
	for s, n := range cfg.Layers {
		if n < 1 {
			return fmt.Errorf("layers %v: stage %d has %d blocks, want at least 1", cfg.Layers, s+1, n)
		}
	}
	if cfg.NumClasses < 1 {
		return fmt.Errorf("num classes %d must be positive", cfg.NumClasses)
	}
	return nil
}

// initConvs redraws every convolution weight from N(0, 2/fan_out),
// torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu"), in
// module order.
func (m *ResNetModel) initConvs(rng *tensor.RNG) {
	for _, nm := range nn.NamedModules(m) {
		c, ok := nm.Module.(*nn.Conv2dLayer)
		if !ok {
			continue
		}
		s := c.Weight.Shape()
		fanOut := s[0] * s[2] * s[3]
		rng.FillNormal(c.Weight, 0, float32(math.Sqrt(2/float64(fanOut))))
	}
}

// Forward returns the logits [N, NumClasses] for images x [N, 3, H, W]. It
// panics with a message naming the input if x is not a batch of 3-channel
// images, or if in training the last stage's feature maps would hold a
// single value per channel (BatchNorm's batch statistics need two).
func (m *ResNetModel) Forward(x *tensor.Tensor) *tensor.Tensor {
	s := x.Shape()
	if len(s) != 4 || s[1] != 3 || s[0] < 1 || s[2] < 1 || s[3] < 1 {
		panic(fmt.Sprintf("models: ResNet: input %v is not a batch of 3-channel images [N, 3, H, W]", s))
	}
	if h, w := m.finalSize(s[2], s[3]); m.Training() && s[0]*h*w < 2 {
		panic(fmt.Sprintf("models: ResNet: input %v leaves %dx%d feature maps per image after the last stage; "+
			"training needs at least 2 values per channel (a larger image or batch, or eval mode)", s, h, w))
	}
	y, inner := convBNReLU(m.conv1, m.bn1, x, nil, nil)
	first := m.stages[0][0]
	if m.maxpool != nil {
		inner = keep(inner, y, m.maxpool)
		y = nn.Call(m.maxpool, y)
		inner = keep(inner, y, append(first.inputReaders(), m.maxpool)...)
	} else {
		inner = keep(inner, y, first.inputReaders()...)
	}
	recycle(inner...)
	// Each block's output is read only by the next block (its convolutions
	// and the residual addition) or, for the last, by the pooling: it goes
	// back to the pool unless a hook on one of them may hold on to it.
	var prev resBlock
	for _, stage := range m.stages {
		for _, b := range stage {
			in := y
			y = nn.Call(b, y)
			if prev != nil {
				recycle(keep(nil, in, append(b.inputReaders(), prev)...)...)
			}
			prev = b
		}
	}
	// adaptive_avg_pool2d to 1×1 and flatten: the mean of each plane.
	pooled := tensor.Mean(y, false, 2, 3)
	recycle(keep(nil, y, prev)...)
	return nn.Call(m.fc, pooled)
}

// keep appends t to inner unless one of the modules that produce or read
// it has hooks (a hook may hold on to the tensors it sees).
func keep(inner []*tensor.Tensor, t *tensor.Tensor, seenBy ...nn.Module) []*tensor.Tensor {
	for _, m := range seenBy {
		if nn.HasForwardHooks(m) {
			return inner
		}
	}
	return append(inner, t)
}

// recycle hands the storage of intermediate results back to package
// tensor's pool once Backward is done with them (tensor.Recycle), so that
// the next training step reuses it instead of allocating. Each is an op's
// own result that only the ops recorded after it read.
func recycle(ts ...*tensor.Tensor) { tensor.Recycle(ts...) }

// finalSize returns the height and width of the last stage's feature maps
// for an h×w input: every stride-2 step (convolutions and the max pooling,
// all padded to keep "same" size at stride 1) maps n to ⌈n/2⌉.
func (m *ResNetModel) finalSize(h, w int) (int, int) {
	for range m.strides {
		h, w = (h+1)/2, (w+1)/2
	}
	return h, w
}

// BasicBlock is torchvision's BasicBlock, two 3×3 convolutions:
//
//	relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
//
// where the shortcut is x itself or, where the block changes the shape,
// downsample: a strided 1×1 convolution and a BatchNorm. State dict names
// conv1.weight, bn1.*, conv2.weight, bn2.* and downsample.0.weight,
// downsample.1.*.
type BasicBlock struct {
	nn.Base
	conv1, conv2 *nn.Conv2dLayer
	bn1, bn2     *nn.BatchNormLayer
	downsample   *projection // nil for the identity shortcut
}

func (b *BasicBlock) inputReaders() []nn.Module {
	return append([]nn.Module{b, b.conv1}, b.downsample.modules()...)
}

func newBasicBlock(in, planes, stride int) *BasicBlock {
	b := &BasicBlock{
		conv1: nn.Conv2d(in, planes, 3, nn.Stride(stride), nn.Padding(1), nn.NoBias()),
		bn1:   nn.BatchNorm2d(planes),
		conv2: nn.Conv2d(planes, planes, 3, nn.Padding(1), nn.NoBias()),
		bn2:   nn.BatchNorm2d(planes),
	}
	b.Register("conv1", b.conv1)
	b.Register("bn1", b.bn1)
	b.Register("conv2", b.conv2)
	b.Register("bn2", b.bn2)
	b.downsample = newDownsample(b, in, planes, stride)
	return b
}

// projection is a block's downsample shortcut: a strided 1×1
// convolution and a BatchNorm, registered as the Sequential seq.
type projection struct {
	seq  *nn.SequentialLayer
	conv *nn.Conv2dLayer
	bn   *nn.BatchNormLayer
}

// modules lists the modules whose forward hooks see the projection's
// input (none for the identity shortcut, a nil p).
func (p *projection) modules() []nn.Module {
	if p == nil {
		return nil
	}
	return []nn.Module{p.seq, p.conv}
}

// newDownsample returns (and registers in parent) the projection
// shortcut from in to out channels at stride, or nil if the shape is kept.
func newDownsample(parent interface{ Register(string, nn.Module) }, in, out, stride int) *projection {
	if stride == 1 && in == out {
		return nil
	}
	p := &projection{conv: nn.Conv2d(in, out, 1, nn.Stride(stride), nn.NoBias()), bn: nn.BatchNorm2d(out)}
	p.seq = nn.Sequential(p.conv, p.bn)
	parent.Register("downsample", p.seq)
	return p
}

// shortcut returns x through the projection p, if there is one, and
// appends its intermediate results to inner (see keep): the
// convolution's output, read only by the BatchNorm, and the BatchNorm's,
// read only by the block's residual addition. Without hooks on the
// Sequential the two layers run as it would run them.
func shortcut(p *projection, x *tensor.Tensor, inner []*tensor.Tensor) (*tensor.Tensor, []*tensor.Tensor) {
	if p == nil {
		return x, inner
	}
	if nn.HasForwardHooks(p.seq) {
		return nn.Call(p.seq, x), inner
	}
	c := nn.Call(p.conv, x)
	inner = keep(inner, c, p.conv, p.bn)
	r := nn.Call(p.bn, c)
	return r, keep(inner, r, p.bn)
}

// convBNReLU returns relu(bn(conv(x)) + residual), or relu(bn(conv(x)))
// for a nil residual, and appends the intermediate results to inner (see
// keep). The BatchNorm, the addition and the ReLU run as one op
// (BatchNormLayer.ForwardReLU) unless bn has forward hooks, which then
// run as in PyTorch on bn's own output; the convolution runs through
// nn.Call, so its hooks run.
func convBNReLU(conv *nn.Conv2dLayer, bn *nn.BatchNormLayer, x, residual *tensor.Tensor, inner []*tensor.Tensor) (*tensor.Tensor, []*tensor.Tensor) {
	c := nn.Call(conv, x)
	inner = keep(inner, c, conv, bn)
	if !nn.HasForwardHooks(bn) {
		return bn.ForwardReLU(c, residual), inner
	}
	n := nn.Call(bn, c)
	inner = keep(inner, n, bn)
	if residual != nil {
		n = tensor.Add(n, residual)
		inner = append(inner, n)
	}
	return tensor.ReLU(n), inner
}

// Forward applies the block to x [N, C, H, W].
func (b *BasicBlock) Forward(x *tensor.Tensor) *tensor.Tensor {
	inner := make([]*tensor.Tensor, 0, 8)
	y, inner := convBNReLU(b.conv1, b.bn1, x, nil, inner)
	inner = keep(inner, y, b.conv2)
	r, inner := shortcut(b.downsample, x, inner)
	y, inner = convBNReLU(b.conv2, b.bn2, y, r, inner)
	recycle(inner...)
	return y
}

// Bottleneck is torchvision's Bottleneck: 1×1, 3×3 (with the block's
// stride) and 1×1 convolutions, the last widening by 4:
//
//	relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut(x))
//
// with the shortcut as for BasicBlock. State dict names conv1.weight …
// conv3.weight, bn1.* … bn3.* and downsample.0.weight, downsample.1.*.
type Bottleneck struct {
	nn.Base
	conv1, conv2, conv3 *nn.Conv2dLayer
	bn1, bn2, bn3       *nn.BatchNormLayer
	downsample          *projection // nil for the identity shortcut
}

func (b *Bottleneck) inputReaders() []nn.Module {
	return append([]nn.Module{b, b.conv1}, b.downsample.modules()...)
}

func newBottleneck(in, planes, stride int) *Bottleneck {
	out := planes * 4
	b := &Bottleneck{
		conv1: nn.Conv2d(in, planes, 1, nn.NoBias()),
		bn1:   nn.BatchNorm2d(planes),
		conv2: nn.Conv2d(planes, planes, 3, nn.Stride(stride), nn.Padding(1), nn.NoBias()),
		bn2:   nn.BatchNorm2d(planes),
		conv3: nn.Conv2d(planes, out, 1, nn.NoBias()),
		bn3:   nn.BatchNorm2d(out),
	}
	b.Register("conv1", b.conv1)
	b.Register("bn1", b.bn1)
	b.Register("conv2", b.conv2)
	b.Register("bn2", b.bn2)
	b.Register("conv3", b.conv3)
	b.Register("bn3", b.bn3)
	b.downsample = newDownsample(b, in, out, stride)
	return b
}

// Forward applies the block to x [N, C, H, W].
func (b *Bottleneck) Forward(x *tensor.Tensor) *tensor.Tensor {
	inner := make([]*tensor.Tensor, 0, 11)
	y, inner := convBNReLU(b.conv1, b.bn1, x, nil, inner)
	inner = keep(inner, y, b.conv2)
	y, inner = convBNReLU(b.conv2, b.bn2, y, nil, inner)
	inner = keep(inner, y, b.conv3)
	r, inner := shortcut(b.downsample, x, inner)
	y, inner = convBNReLU(b.conv3, b.bn3, y, r, inner)
	recycle(inner...)
	return y
}
