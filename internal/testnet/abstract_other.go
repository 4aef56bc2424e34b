//go:build !linux

package testnet

// abstractSockets: without abstract Unix sockets ports are not claimed.
const abstractSockets = false
