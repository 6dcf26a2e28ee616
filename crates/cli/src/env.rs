//! The one place the environment is read: the switches (`STRATA_*`, listed with their meanings in
//! strata_cuda::runtime::settings::SWITCHES and docs/DETAILS.md) become one [`Settings`] value at start-up, which
//! every command passes down. A value a switch does not take, or a `STRATA_` name that is no switch, is
//! said once in a note.

use std::sync::OnceLock;

use strata_cuda::Settings;

/// The settings, read from the environment on first use (the start of a command).
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let (settings, notes) = Settings::read(&|name| std::env::var(name).ok());
        for note in notes {
            eprintln!("note: {note}");
        }
        let names: Vec<String> = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect();
        for name in Settings::unknown(names.iter().map(String::as_str)) {
            eprintln!("note: {name} is not a setting of strata (docs/DETAILS.md lists them); it changes nothing");
        }
        if let Some(v) = settings.cpu_vector {
            strata_model::ops::vector::set(v);
        }
        strata_model::ops::vector::set_q2_0_wide(settings.q2_0_wide);
        settings
    })
}
