// Package checkpoint saves and loads models and training state.
//
// Models are stored as safetensors files with PyTorch's parameter names and
// layouts, so a file written here loads into the same PyTorch model with
// load_state_dict and the other way round. Every file is written
// atomically: to a temporary file in the same directory, fsynced, renamed
// over the destination, and the directory fsynced; a crash leaves either
// the old file or the new one, never a partial file. SaveTraining commits
// a model file and its training state as a pair: both are written and
// fsynced before either replaces the previous pair.
//
// Reading validates the whole file before trusting it: a truncated or
// corrupt file is an error that names the file and what is wrong, and a
// corrupt header length cannot cause a large allocation. Files written
// here carry a CRC-32C of each tensor's bytes in their metadata
// (ChecksumKey), so a flipped bit is an error naming the file and the
// tensor; files without it, such as PyTorch's, load unchecked. A NaN or an
// infinity is an error too, unless AllowNonFinite is given.
//
// SaveTraining and LoadTraining checkpoint a whole training run; in a job
// of several ranks, ResumeFrom makes rank 0's checkpoint the one every rank
// resumes from, sent over the process group, so the ranks need no shared
// file system.
package checkpoint
