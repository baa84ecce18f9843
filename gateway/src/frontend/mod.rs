//! Frontends: thin translators between a wire protocol and the [`crate::service::GatewayService`].

pub mod flight;
pub mod pg;
