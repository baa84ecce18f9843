//! The engines a gateway runs statements on: the embedded DataFusion planner (which describes
//! every statement and answers the catalog and `lakegate.*` tables) and the others by name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lakegate_engines::datafusion_engine::DataFusionEngine;
use lakegate_engines::{Engine, EngineRef};

use crate::error::{Error, Result};

/// The engines a gateway runs queries on.
pub struct Engines {
    /// DataFusion: describes every statement, answers the catalog and `lakegate.*` tables.
    pub planner: Arc<DataFusionEngine>,
    /// Every engine by name, the planner included, in configuration order.
    pub all: Vec<EngineRef>,
    /// The engine for queries nobody pinned (until the router chooses per query).
    pub default: String,
    /// The copies the `accelerated` engine answers from, when `[acceleration]` names tables.
    pub accelerator: Option<Arc<lakegate_engines::accel::Accelerator>>,
}

/// One engine's answer to a health check.
#[derive(Debug, Clone)]
pub struct EngineHealth {
    /// The engine.
    pub engine: String,
    /// Why it is unhealthy (`None`: it answered).
    pub error: Option<String>,
    /// How long the check took.
    pub check_ms: f64,
}

/// How long a health check may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

impl Engines {
    /// Only the embedded DataFusion engine.
    pub fn planner_only(planner: Arc<DataFusionEngine>) -> Self {
        Self {
            all: vec![planner.clone() as EngineRef],
            default: planner.name().to_string(),
            planner,
            accelerator: None,
        }
    }

    /// The engine named `name`.
    ///
    /// # Errors
    /// [`Error::EngineNotConfigured`] naming the ones that are.
    pub fn get(&self, name: &str) -> Result<&EngineRef> {
        self.all
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| Error::EngineNotConfigured {
                name: name.to_string(),
                available: self.names().join(", "),
            })
    }

    /// The names of the configured engines.
    pub fn names(&self) -> Vec<&str> {
        self.all.iter().map(|e| e.name()).collect()
    }

    /// Whether `engine` is the embedded planner.
    pub fn is_planner(&self, engine: &str) -> bool {
        engine == self.planner.name()
    }

    /// Every engine's health, checked now and concurrently (at most 5 s each).
    pub async fn health(&self) -> Vec<EngineHealth> {
        let checks = self.all.iter().map(|e| async move {
            let started = Instant::now();
            let error = match tokio::time::timeout(HEALTH_TIMEOUT, e.health()).await {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(err.to_string()),
                Err(_) => Some("no answer within 5 s".to_string()),
            };
            EngineHealth {
                engine: e.name().to_string(),
                error,
                check_ms: started.elapsed().as_secs_f64() * 1000.0,
            }
        });
        futures::future::join_all(checks).await
    }
}
