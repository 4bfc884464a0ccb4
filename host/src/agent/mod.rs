//! The agent of a host (docs/hosts.md): `gpuipc-host agent --name NAME --listen ENDPOINT`.
//! It opens a Zenoh session listening on the endpoint (TCP, no multicast scouting: peers are
//! named, never discovered), announces itself with a liveliness token, and answers what it is
//! to anyone who asks (`validate --ask-hosts`), until SIGINT or SIGTERM. Taking a share of a
//! run (its rings and stage processes) is the next step of issue 14.

pub mod control;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zenoh::Wait;

/// Run the agent until a stop signal.
pub fn main(name: &str, listen: &str) -> ExitCode {
    match serve(name, listen) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: agent '{name}': {e}");
            ExitCode::from(1)
        }
    }
}

fn serve(name: &str, listen: &str) -> Result<(), String> {
    crate::config::StageName::parse(name).map_err(|_| format!("name `{name}`: use letters, digits, `-` and `_`, starting with a letter"))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in crate::supervisor::STOP_SIGNALS {
        signal_hook::flag::register(signal, stop.clone()).map_err(|e| format!("cannot install signal handlers: {e}"))?;
    }
    let session = zenoh::open(control::config(Some(listen), &[])?).wait().map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let _token = session
        .liveliness()
        .declare_token(control::liveliness_key(name))
        .wait()
        .map_err(|e| format!("cannot announce itself: {e}"))?;
    let info = serde_json::to_string(&control::AgentInfo::of_this_machine(name)).map_err(|e| e.to_string())?;
    let key = control::info_key(name);
    let _queryable = session
        .declare_queryable(&key)
        .callback(move |query| {
            if let Err(e) = query.reply(query.key_expr().clone(), info.clone()).wait() {
                tracing::warn!("cannot answer {}: {e}", query.key_expr());
            }
        })
        .wait()
        .map_err(|e| format!("cannot answer on {key}: {e}"))?;
    eprintln!("agent '{name}' listening on {listen}; stop it with Ctrl-C or SIGTERM");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    session.close().wait().map_err(|e| format!("closing the session: {e}"))?;
    eprintln!("agent '{name}' stopped");
    Ok(())
}
