//! muster-dns's integration tests: the answer builder in-process, the listener over real
//! sockets with a real resolver, and the fuzz corpus replayed.

mod corpus;
mod fixture;
mod large;
mod listener;
mod live;
mod resolver;
mod support;
mod wellformed;
mod zone;
