//! What the daemon answers over HTTP: the router and its state, and one module per
//! route (status and events, health, history, stacks, the status page).

pub mod health;
pub mod history;
pub mod page;
pub mod router;
pub mod stacks;
pub mod state;
pub mod status;
