package nn

import (
	"testing"

	"github.com/gotrain/gotrain/internal/testfixture"
	"github.com/gotrain/gotrain/tensor"
)

// transformerFixtures mirrors testdata/transformer_fixtures.json, written
// by testdata/gen_transformer_fixtures.py with PyTorch in float64.
type transformerFixtures struct {
	Modules []struct {
		Name       string               `json:"name"`
		State      map[string]fixTensor `json:"state"`
		Input      fixTensor            `json:"input"`
		IDs        []int                `json:"ids"`
		IDsShape   []int                `json:"ids_shape"`
		GradOutput fixTensor            `json:"grad_output"`
		Output     fixTensor            `json:"output"`
		GradInput  fixTensor            `json:"grad_input"`
		ParamGrads map[string]fixTensor `json:"param_grads"`
	} `json:"modules"`
	Ops []struct {
		Name       string      `json:"name"`
		Inputs     []fixTensor `json:"inputs"`
		GradOutput *fixTensor  `json:"grad_output"`
		Output     fixTensor   `json:"output"`
		GradInputs []fixTensor `json:"grad_inputs"`
		Target     []int       `json:"target"`
		Reduction  string      `json:"reduction"`
	} `json:"ops"`
	Reprs map[string]string `json:"reprs"`
}

var transformerModules = map[string]func() Module{
	"layernorm":             func() Module { return LayerNorm(6) },
	"layernorm_nobias":      func() Module { return LayerNorm(5, NoBias()) },
	"embedding":             func() Module { return Embedding(7, 4) },
	"causal_self_attention": func() Module { return CausalSelfAttention(8, 2, 0) },
	"gelu_tanh":             func() Module { return GELUTanh() },
}

var transformerOps = map[string]func(in []*tensor.Tensor, target []int, reduction string) *tensor.Tensor{
	"sdpa_full": func(in []*tensor.Tensor, _ []int, _ string) *tensor.Tensor {
		return tensor.ScaledDotProductAttention(in[0], in[1], in[2], false)
	},
	"sdpa_causal": func(in []*tensor.Tensor, _ []int, _ string) *tensor.Tensor {
		return tensor.ScaledDotProductAttention(in[0], in[1], in[2], true)
	},
	"matmul_broadcast": func(in []*tensor.Tensor, _ []int, _ string) *tensor.Tensor {
		return tensor.MatMul(in[0], in[1], false, false)
	},
	"matmul_transposed": func(in []*tensor.Tensor, _ []int, _ string) *tensor.Tensor {
		return tensor.MatMul(in[0], in[1], true, true)
	},
	"cross_entropy_ignore_mean": func(in []*tensor.Tensor, t []int, r string) *tensor.Tensor {
		return tensor.CrossEntropyIgnore(in[0], t, -100, r)
	},
	"cross_entropy_ignore_sum": func(in []*tensor.Tensor, t []int, r string) *tensor.Tensor {
		return tensor.CrossEntropyIgnore(in[0], t, -100, r)
	},
}

// TestTransformerLayersMatchPyTorch loads each layer's PyTorch weights,
// runs forward and backward with PyTorch's output gradient and compares
// the output, the input gradient and every parameter gradient.
func TestTransformerLayersMatchPyTorch(t *testing.T) {
	f := testfixture.Load[transformerFixtures](t, "transformer_fixtures.json")
	if len(f.Modules) != len(transformerModules) || len(f.Ops) != len(transformerOps) {
		t.Errorf("fixtures have %d modules and %d ops, the test knows %d and %d", len(f.Modules), len(f.Ops), len(transformerModules), len(transformerOps))
	}
	for _, c := range f.Modules {
		t.Run(c.Name, func(t *testing.T) {
			build, ok := transformerModules[c.Name]
			if !ok {
				t.Fatalf("no gotrain twin for %q", c.Name)
			}
			m := build()
			sd := map[string]*tensor.Tensor{}
			for k, v := range c.State {
				sd[k] = tensor32(v)
			}
			if err := LoadStateDict(m, sd, true); err != nil {
				t.Fatal(err)
			}
			var x, y *tensor.Tensor
			if c.IDs != nil {
				y = m.(*EmbeddingLayer).Lookup(c.IDs, c.IDsShape...)
			} else {
				x = tensor32(c.Input).SetRequiresGrad(true)
				y = m.Forward(x)
			}
			closeTo(t, "output", y, c.Output, 1e-5)
			if err := y.BackwardWith(tensor32(c.GradOutput)); err != nil {
				t.Fatal(err)
			}
			if x != nil {
				closeTo(t, "grad_input", x.Grad(), c.GradInput, 1e-5)
			}
			for _, p := range NamedParameters(m) {
				closeTo(t, "grad "+p.Name, p.Tensor.Grad(), c.ParamGrads[p.Name], 1e-5)
			}
		})
	}
	for _, c := range f.Ops {
		t.Run(c.Name, func(t *testing.T) {
			op, ok := transformerOps[c.Name]
			if !ok {
				t.Fatalf("no gotrain twin for %q", c.Name)
			}
			var in []*tensor.Tensor
			for _, v := range c.Inputs {
				in = append(in, tensor32(v).SetRequiresGrad(true))
			}
			y := op(in, c.Target, c.Reduction)
			closeTo(t, "output", y, c.Output, 1e-5)
			var err error
			if c.GradOutput != nil {
				err = y.BackwardWith(tensor32(*c.GradOutput))
			} else {
				err = y.Backward()
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range in {
				closeTo(t, "grad_input", x.Grad(), c.GradInputs[i], 1e-5)
			}
		})
	}
}

// TestTransformerReprs compares nn.Repr of the new layers with PyTorch's
// print output.
func TestTransformerReprs(t *testing.T) {
	f := testfixture.Load[transformerFixtures](t, "transformer_fixtures.json")
	got := map[string]string{
		"layernorm":             Repr(LayerNorm(6)),
		"layernorm_eps":         Repr(LayerNorm(3, Eps(1e-6))),
		"embedding":             Repr(Embedding(7, 4)),
		"gelu_tanh":             Repr(GELUTanh()),
		"module_list":           Repr(ModuleList(LayerNorm(4), Dropout(0.1))),
		"causal_self_attention": Repr(CausalSelfAttention(8, 2, 0.1)),
	}
	for k, want := range f.Reprs {
		if got[k] != want {
			t.Errorf("%s:\n%s\nPyTorch:\n%s", k, got[k], want)
		}
	}
}
