//! Python stages (`plugin = "python"`) in the cpu domain, with NumPy: real stage processes
//! running the interpreter of `$GPUIPC_PYTHON` (else `python3`). Where that interpreter or its
//! NumPy is missing, each test says so and passes, unless `GPUIPC_REQUIRE_PYTHON` is set (CI
//! sets it, with a virtual environment it makes).

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// Whether Python stages can run here; panics where they must (`GPUIPC_REQUIRE_PYTHON`).
fn python_ready() -> bool {
    let exe = std::env::var("GPUIPC_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".to_owned());
    let ok = std::process::Command::new(&exe)
        .args([
            "-c",
            "import numpy, sysconfig, sys; sys.exit(0 if sysconfig.get_config_var('Py_ENABLE_SHARED') else 1)",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("GPUIPC_REQUIRE_PYTHON").is_none(),
            "GPUIPC_REQUIRE_PYTHON is set, but `{exe}` has no NumPy or no shared libpython"
        );
        eprintln!("skipped: `{exe}` has no NumPy or no shared libpython (set GPUIPC_PYTHON)");
    }
    ok
}

/// The classes the tests run, written into the test's folder.
const CLASSES: &str = r#"
import sys, time

class Boom:
    def __init__(self, params, input_formats, output_format, ctx):
        self.at = params["at"]

    def process(self, inputs, output, ctx):
        if inputs[0].info.seq == self.at:
            raise ValueError(f"frame {self.at} is cursed")
        output.planes[0][...] = inputs[0].planes[0]

class Exit(Boom):
    def process(self, inputs, output, ctx):
        if inputs[0].info.seq == self.at:
            sys.exit(3)
        output.planes[0][...] = inputs[0].planes[0]

class Hang(Boom):
    def process(self, inputs, output, ctx):
        while inputs[0].info.seq == self.at:
            pass
        output.planes[0][...] = inputs[0].planes[0]

class Second:
    """Fan-in: checks the two frames are one aligned set, and passes the second on."""
    def __init__(self, params, input_formats, output_format, ctx):
        assert len(input_formats) == 2 and output_format == input_formats[1], (input_formats, output_format)

    @staticmethod
    def negotiate(params, input_formats):
        return input_formats[1]

    def process(self, inputs, output, ctx):
        a, b = inputs
        if a.info.seq != b.info.seq:
            raise ValueError(f"not aligned: {a.info.seq} and {b.info.seq}")
        output.planes[0][...] = b.planes[0]

class Sink:
    """Writes each frame's number, its first pixel and whether its planes are read-only."""
    def __init__(self, params, input_formats, output_format, ctx):
        assert output_format is None
        self.path = params["path"]
        self.lines = []

    @staticmethod
    def negotiate(params, input_formats):
        return None

    def process(self, inputs, output, ctx):
        assert output is None
        plane = inputs[0].planes[0]
        self.lines.append(f"{inputs[0].info.seq} {ctx.frame_index} {plane.shape} {plane.flags.writeable} {plane[0, 0, 0]}")

    def flush(self):
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\nflushed\n")

class BadNegotiate:
    @staticmethod
    def negotiate(params, input_formats):
        return input_formats[0].nope

class Counter:
    """A source: rgb8 frames whose every byte is the frame's number mod 256, `count` of them."""
    @staticmethod
    def negotiate(params, input_formats):
        assert input_formats == []
        import gpuipc
        return gpuipc.Format("rgb8", 64, 48)

    def __init__(self, params, input_formats, output_format, ctx):
        self.count = params["count"]

    def process(self, inputs, output, ctx):
        assert inputs == []
        if output.info.seq == self.count:
            output.end_stream()
            return
        output.planes[0][...] = output.info.seq % 256

class SourceWithoutNegotiate:
    def __init__(self, params, input_formats, output_format, ctx):
        pass
"#;

fn classes(dir: &Path) -> PathBuf {
    let path = dir.join("classes.py");
    std::fs::write(&path, CLASSES).unwrap();
    path
}

/// generator -> `middle` -> null, 30 frames of 64x48 noise.
fn chain(middle: &str, extra: &str) -> String {
    format!(
        "[pipeline]\nname = \"py\"\ndevice = \"cpu\"\nframes = 30\n{extra}\n\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nparams = {{ width = 64, height = 48, pattern = \"noise\" }}\n\n\
         [[stage]]\nname = \"py\"\ninputs = [\"gen\"]\n{middle}\n\n\
         [[stage]]\nname = \"sink\"\nplugin = \"null\"\ninputs = [\"py\"]\n"
    )
}

fn grade_params(plugin: &str) -> String {
    let own = "brightness = 0.1, contrast = 1.2, gamma = 1.1, invert = true";
    match plugin {
        "python" => format!(
            "plugin = \"python\"\nparams = {{ script = \"{}\", class = \"Grade\", {own} }}",
            repo_root().join("pipelines/python/grade.py").display()
        ),
        _ => format!("plugin = \"rgb-process\"\nparams = {{ {own} }}"),
    }
}

#[test]
fn a_numpy_grade_equals_rgb_process_byte_for_byte_in_processes_and_in_one() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-grade");
    let sums = |plugin: &str, extra: &[&str]| {
        let file = pipeline(&dir, &format!("{plugin}.toml"), &chain(&grade_params(plugin), ""));
        let taps = dir.join(format!("sums-{plugin}-{}", extra.len()));
        let mut args = vec!["run", file.to_str().unwrap(), "--quiet", "--checksums", taps.to_str().unwrap()];
        args.extend(extra);
        let out = run(&dir, &args);
        assert_eq!(out.status.code(), Some(0), "{}", out.output());
        assert_nothing_left(out.pid);
        std::fs::read_to_string(taps.join("py.sum")).unwrap()
    };
    let reference = sums("rgb-process", &[]);
    assert_eq!(reference.lines().count(), 30);
    assert_eq!(sums("python", &[]), reference, "separate processes");
    assert_eq!(sums("python", &["--in-process"]), reference, "one process");
}

#[test]
fn a_python_sink_gets_every_frame_in_order_read_only_and_is_flushed() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-sink");
    let script = classes(&dir);
    let out_file = dir.join("seen.txt");
    let sink = format!(
        "plugin = \"python\"\nparams = {{ script = \"{}\", class = \"Sink\", path = \"{}\" }}",
        script.display(),
        out_file.display()
    );
    let text = format!(
        "[pipeline]\ndevice = \"cpu\"\nframes = 30\n\n[[stage]]\nname = \"gen\"\nplugin = \"generator\"\nparams = {{ width = 64, height = 48, pattern = \"gradient\" }}\n\n[[stage]]\nname = \"py\"\ninputs = [\"gen\"]\n{sink}\n"
    );
    let file = pipeline(&dir, "p.toml", &text);
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let seen = std::fs::read_to_string(&out_file).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 31, "{seen}");
    for (k, line) in lines[..30].iter().enumerate() {
        // seq, frame index, an rgb8 plane as rows x columns x 3 bytes, read-only.
        assert!(line.starts_with(&format!("{k} {k} (48, 64, 3) False ")), "{line}");
    }
    assert_eq!(lines[30], "flushed");
    assert_nothing_left(out.pid);
}

#[test]
fn a_python_fan_in_gets_aligned_sets() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-fan-in");
    let script = classes(&dir);
    let text = format!(
        "[pipeline]\ndevice = \"cpu\"\nframes = 30\n\n\
         [[stage]]\nname = \"a\"\nplugin = \"generator\"\nparams = {{ width = 64, height = 48, pattern = \"noise\", seed = 1 }}\n\n\
         [[stage]]\nname = \"b\"\nplugin = \"generator\"\nparams = {{ width = 32, height = 16, pattern = \"noise\", seed = 2 }}\n\n\
         [[stage]]\nname = \"py\"\ninputs = [\"a\", \"b\"]\nplugin = \"python\"\nparams = {{ script = \"{}\", class = \"Second\" }}\n\n\
         [[stage]]\nname = \"sink\"\nplugin = \"null\"\ninputs = [\"py\"]\n",
        script.display()
    );
    let file = pipeline(&dir, "p.toml", &text);
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet", "--checksums", "sums"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let sums = dir.join("sums");
    assert_eq!(sum_lines(&sums.join("py.sum")), sum_lines(&sums.join("b.sum")), "the second input, frame by frame");
    assert_eq!(sum_lines(&sums.join("py.sum")).len(), 30);
}

#[test]
fn an_exception_fails_the_stage_with_its_traceback_and_a_restart_loses_only_that_frame() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-exception");
    let script = classes(&dir);
    let middle =
        format!("plugin = \"python\"\nparams = {{ script = \"{}\", class = \"Boom\", at = 5 }}", script.display());
    let file = pipeline(&dir, "p.toml", &chain(&middle, ""));
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    let all = out.output();
    assert!(all.contains("stage 'py' got an error from the plugin's `process` at frame 5: Python exception:"), "{all}");
    assert!(all.contains(&format!("File \"{}\", line 10, in process", script.display())), "{all}");
    assert!(all.contains("ValueError: frame 5 is cursed"), "{all}");
    assert_nothing_left(out.pid);

    let file = pipeline(&dir, "restart.toml", &chain(&middle, "restart = \"on-failure\"\nrestart_backoff = \"10ms\""));
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet", "--report", "report.json", "--checksums", "sums"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let seqs: Vec<u64> = sum_lines(&dir.join("sums/sink.sum")).iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (0..30).filter(|&s| s != 5).collect::<Vec<_>>(), "every frame but the cursed one");
    assert_nothing_left(out.pid);
}

#[test]
fn sys_exit_fails_the_stage_saying_so() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-exit");
    let script = classes(&dir);
    let middle =
        format!("plugin = \"python\"\nparams = {{ script = \"{}\", class = \"Exit\", at = 4 }}", script.display());
    let file = pipeline(&dir, "p.toml", &chain(&middle, ""));
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(
        out.stdout.contains(
            "stage 'py' got an error from the plugin's `process` at frame 4: the Python code called sys.exit(3)"
        ),
        "{}",
        out.output()
    );
    assert_nothing_left(out.pid);
}

#[test]
fn a_hang_in_python_is_ended_by_the_watchdog() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-hang");
    let script = classes(&dir);
    let middle =
        format!("plugin = \"python\"\nparams = {{ script = \"{}\", class = \"Hang\", at = 3 }}", script.display());
    let file = pipeline(&dir, "p.toml", &chain(&middle, "stall_timeout = \"500ms\""));
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(
        out.stdout.contains(
            "stage 'py' stalled: no progress for 500 ms (in the plugin's process at frame 3); killed by the watchdog"
        ),
        "{}",
        out.output()
    );
    assert_nothing_left(out.pid);
}

#[test]
fn validate_reports_python_errors_with_file_and_line() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-validate");
    let script = classes(&dir);
    let cases = [
        (
            format!("script = \"{}\", class = \"Nope\"", script.display()),
            vec![format!(
                "script `{}` defines no `Nope`; its classes: BadNegotiate, Boom, Counter, Exit, Hang, Second, Sink, SourceWithoutNegotiate",
                script.display()
            )],
        ),
        (
            format!("script = \"{}\", class = \"BadNegotiate\"", script.display()),
            vec![
                format!("File \"{}\", line 63, in negotiate", script.display()),
                "AttributeError: 'gpuipc.Format' object has no attribute 'nope'".to_owned(),
            ],
        ),
        (
            "script = \"missing.py\", class = \"X\"".to_owned(),
            vec!["script `missing.py`: No such file or directory".to_owned()],
        ),
        (
            "class = \"X\"".to_owned(),
            vec!["param `script` (a Python file) or `module` (an importable module) is required".to_owned()],
        ),
        (
            "module = \"no_such_module_here\", class = \"X\"".to_owned(),
            vec!["ModuleNotFoundError: No module named 'no_such_module_here'".to_owned()],
        ),
    ];
    for (params, wanted) in cases {
        let file = pipeline(&dir, "p.toml", &chain(&format!("plugin = \"python\"\nparams = {{ {params} }}"), ""));
        let out = run(&dir, &["validate", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{params}: {}", out.output());
        assert!(out.stderr.contains("p.toml:16:10: error: stage 'py': "), "{params}: {}", out.output());
        for w in wanted {
            assert!(out.stderr.contains(&w), "{params}: wanted {w:?} in {}", out.output());
        }
    }
}

#[test]
fn the_example_pipeline_runs_from_the_repository_root() {
    if !python_ready() {
        return;
    }
    let out = run(&repo_root(), &["run", "pipelines/python/grade.toml", "--quiet", "--frames", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert!(out.stdout.contains("run 'python-grade' finished"), "{}", out.output());
    assert_nothing_left(out.pid);
}

#[test]
fn a_python_source_makes_frames_until_it_ends_its_stream() {
    if !python_ready() {
        return;
    }
    let dir = scratch("python-source");
    let script = classes(&dir);
    let seen = dir.join("seen.txt");
    let text = format!(
        "[pipeline]\ndevice = \"cpu\"\n\n[[stage]]\nname = \"src\"\nplugin = \"python\"\nparams = {{ script = \"{s}\", class = \"Counter\", count = 300 }}\n\n\
         [[stage]]\nname = \"py\"\ninputs = [\"src\"]\nplugin = \"python\"\nparams = {{ script = \"{s}\", class = \"Sink\", path = \"{}\" }}\n",
        seen.display(),
        s = script.display()
    );
    let file = pipeline(&dir, "p.toml", &text);
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let seen = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 301, "300 frames, then flushed: {seen}");
    for (k, line) in lines[..300].iter().enumerate() {
        assert_eq!(*line, format!("{k} {k} (48, 64, 3) False {}", k % 256));
    }
    assert_nothing_left(out.pid);

    let text = format!(
        "[[stage]]\nname = \"src\"\nplugin = \"python\"\nparams = {{ script = \"{}\", class = \"SourceWithoutNegotiate\" }}\n",
        script.display()
    );
    let file = pipeline(&dir, "bad.toml", &text);
    let out = run(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", out.output());
    assert!(out.stderr.contains("class `SourceWithoutNegotiate` is a source (no inputs), so it needs a static `negotiate(params, input_formats)` that returns its output format"), "{}", out.output());

    let text = format!(
        "[[stage]]\nname = \"src\"\nplugin = \"python\"\nreplicas = 2\nparams = {{ script = \"{}\", class = \"Counter\", count = 3 }}\n",
        script.display()
    );
    let file = pipeline(&dir, "replicas.toml", &text);
    let out = run(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", out.output());
    assert!(
        out.stderr.contains("stage 'src' is a source (no inputs): each replica would make the whole stream"),
        "{}",
        out.output()
    );
}
