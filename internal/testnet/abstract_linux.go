package testnet

// abstractSockets: Linux has abstract Unix sockets, so a failed claim
// means another test holds the port.
const abstractSockets = true
