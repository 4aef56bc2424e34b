// Package nn builds neural networks from layers, PyTorch's torch.nn in Go:
// modules with named parameters and buffers, train/eval mode, state dicts
// with PyTorch's names and layouts, layers, losses and PyTorch's default
// initialisation.
//
// # Modules and names
//
// Every layer and model implements Module by embedding Base. A module
// registers its parameters, buffers and children by name; names join with
// dots into PyTorch's state-dict keys. Sequential names its children "0",
// "1", …, so nn.Sequential(nn.Flatten(), nn.Linear(784, 10)) has the
// parameters "1.weight" [10 784] and "1.bias" [10], exactly as the same
// torch.nn.Sequential. A struct embedding Base and registering
// children with Register("fc1", ...) gives "fc1.weight" and so on.
//
// NamedParameters and Parameters list parameters in registration order
// (each module's own, modules in pre-order), which is what optimizers and
// DDP consume. StateDict lists parameters and buffers in the order of
// PyTorch's state_dict(), and LoadStateDict copies values back in,
// reporting every missing, unexpected and mis-shaped key at once.
//
// # Transformers
//
// Embedding, LayerNorm, CausalSelfAttention (nanoGPT's, on the fused
// tensor.SelfAttentionQKV), ModuleList and ModuleDict build
// GPT-style models with PyTorch's names; models.GPT is nanoGPT's. Modules
// whose input is token ids take them as []int (Lookup) or, through
// Forward, as a float32 tensor of whole numbers (IDTensor). A parameter
// shared by two modules (LinearLayer.TieWeight) is one tensor: its
// gradient sums both uses within a backward pass and its gradient hooks
// fire once, after the last use.
//
// # Integer buffers
//
// All tensors hold float32. The one state entry whose PyTorch type is not
// float32 is BatchNorm's "num_batches_tracked", a 0-d int64 counter: its
// Named.Dtype is Int64 and its value is stored as a float32 (exact up to
// 2^24 batches). Checkpoint writers must write entries with Dtype Int64 as
// int64 and convert them back to float32 tensors when reading.
//
// # Initialisation
//
// Layer constructors initialise like PyTorch: Linear and Conv2d weights
// kaiming-uniform with a = √5 (so U(±1/√fan_in)), biases U(±1/√fan_in),
// BatchNorm weight 1 and bias 0. Values come from one package generator:
// SetSeed(s) followed by building a model gives the same weights every
// time (DefaultSeed is used until SetSeed is called). ResetParameters
// re-initialises a model from an explicit *tensor.RNG instead.
//
// # Mistakes
//
// Giving a layer an input of the wrong shape is a programming mistake and
// panics with a message naming the layer and the shapes, for example
// "nn: Linear(784→512): input [64 10] does not match in_features 784".
// Problems with data from outside the program, such as a state dict read
// from a file, are returned as errors. Options and errors follow the
// module's conventions, described in package github.com/gotrain/gotrain.
package nn
