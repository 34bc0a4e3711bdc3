//! The nine `wapc.*` imports (waPC protocol as implemented by `wapc-guest` 1.x).
//! Every guest pointer is bounds-checked by wasmtime; a bad one traps the instance.

use super::{memory, PastTotalDeadline, State};
use std::time::Instant;
use wasmtime::{Caller, Linker};

use wasmtime::{bail, format_err, Result};

fn read(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Result<Vec<u8>> {
    let mem = memory(caller)?;
    let len = usize::try_from(len).map_err(|_| format_err!("negative length {len}"))?;
    // Guards against a guest announcing more than its memory holds.
    if len > mem.data_size(&*caller) {
        bail!("guest buffer of {len} bytes exceeds its memory");
    }
    let mut buf = vec![0u8; len];
    mem.read(&*caller, offset(ptr)?, &mut buf)?;
    Ok(buf)
}

fn read_str(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Result<String> {
    String::from_utf8(read(caller, ptr, len)?)
        .map_err(|e| format_err!("guest string is not UTF-8: {e}"))
}

fn write(caller: &mut Caller<'_, State>, ptr: i32, bytes: &[u8]) -> Result<()> {
    let mem = memory(caller)?;
    mem.write(&mut *caller, offset(ptr)?, bytes)?;
    Ok(())
}

fn offset(ptr: i32) -> Result<usize> {
    // wasm32 pointers are unsigned.
    Ok(ptr as u32 as usize)
}

/// Adds the waPC host functions under module `wapc`.
pub fn add_to_linker(linker: &mut Linker<State>) -> Result<()> {
    linker.func_wrap(
        "wapc",
        "__guest_request",
        |mut c: Caller<'_, State>, op_ptr: i32, ptr: i32| {
            let (op, payload) = {
                let (op, payload) = c.data().invocation();
                (op.as_bytes().to_vec(), payload.to_vec())
            };
            write(&mut c, op_ptr, &op)?;
            write(&mut c, ptr, &payload)
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__guest_response",
        |mut c: Caller<'_, State>, ptr: i32, len: i32| {
            let bytes = read(&mut c, ptr, len)?;
            c.data_mut().set_guest_response(bytes);
            Ok(())
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__guest_error",
        |mut c: Caller<'_, State>, ptr: i32, len: i32| {
            let msg = String::from_utf8_lossy(&read(&mut c, ptr, len)?).into_owned();
            c.data_mut().set_guest_error(msg);
            Ok(())
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__host_call",
        |mut c: Caller<'_, State>,
         bd: i32,
         bd_len: i32,
         ns: i32,
         ns_len: i32,
         op: i32,
         op_len: i32,
         ptr: i32,
         len: i32| {
            let binding = read_str(&mut c, bd, bd_len)?;
            let namespace = read_str(&mut c, ns, ns_len)?;
            let operation = read_str(&mut c, op, op_len)?;
            let payload = read(&mut c, ptr, len)?;
            // Past the total deadline no API call starts: nobody waits for the answer.
            if c.data().past_total_deadline(Instant::now()) {
                return Err(wasmtime::Error::new(PastTotalDeadline));
            }
            let ok = c
                .data_mut()
                .host_call(&binding, &namespace, &operation, &payload);
            // The guest's own budget again (time blocked in a host call, which has its
            // own timeouts, does not count against it), within what is left of the total —
            // but never less than a grace to act on the answer: a call that returned (a
            // claim written, say) is not thrown away; the next one would not start.
            let ticks = c.data().ticks_after_host_call(Instant::now());
            wasmtime::AsContextMut::as_context_mut(&mut c).set_epoch_deadline(ticks);
            Ok(i32::from(ok))
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__host_response_len",
        |c: Caller<'_, State>| -> i32 {
            i32::try_from(c.data().host_response().len()).unwrap_or(i32::MAX)
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__host_response",
        |mut c: Caller<'_, State>, ptr: i32| {
            let bytes = c.data().host_response().to_vec();
            write(&mut c, ptr, &bytes)
        },
    )?;
    linker.func_wrap("wapc", "__host_error_len", |c: Caller<'_, State>| -> i32 {
        i32::try_from(c.data().host_error().len()).unwrap_or(i32::MAX)
    })?;
    linker.func_wrap(
        "wapc",
        "__host_error",
        |mut c: Caller<'_, State>, ptr: i32| {
            let bytes = c.data().host_error().to_vec();
            write(&mut c, ptr, &bytes)
        },
    )?;
    linker.func_wrap(
        "wapc",
        "__console_log",
        |mut c: Caller<'_, State>, ptr: i32, len: i32| {
            let msg = String::from_utf8_lossy(&read(&mut c, ptr, len)?).into_owned();
            c.data().log(&msg);
            Ok(())
        },
    )?;
    Ok(())
}
