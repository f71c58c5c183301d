//! The errors a command replies with. Messages are static C strings: replying with one
//! allocates nothing, and no user input is ever echoed into a reply or a log.

use std::ffi::CStr;

use crate::core::params::ParamError;

/// An error reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// Too few or too many arguments: Redis' own `ERR wrong number of arguments for '...'
    /// command`.
    WrongArity,
    /// A malformed call: `ERR syntax error. Usage: ...`, the usage rendered from the command's
    /// argument specs (the same `COMMAND DOCS` shows), so that it is never written twice.
    Syntax,
    /// A malformed call with a word on what: `ERR <what>. Usage: ...`, the usage rendered as
    /// for [`CommandError::Syntax`].
    Usage(&'static CStr),
    /// Any other error, with its full message (`ERR ...` or `WRONGTYPE ...`).
    Message(&'static CStr),
}

impl CommandError {
    /// The key holds another type, or a string that is not this command's state.
    pub const WRONG_TYPE: CommandError =
        CommandError::Message(c"WRONGTYPE Operation against a key holding the wrong kind of value");

    /// A panic was caught (a bug): Redis keeps running and the panic is in its log.
    pub const INTERNAL: CommandError =
        CommandError::Message(c"ERR internal error in the ratelimit module (see the server log)");

    /// Over `maxmemory` after Redis' evictions: Redis' own reply to a `deny-oom` command,
    /// given by the module to the calls that would write (peeks and refusals still answer).
    pub const OUT_OF_MEMORY: CommandError =
        CommandError::Message(c"OOM command not allowed when used memory > 'maxmemory'.");

    /// The server would not open the key for writing (Valkey gives no key while a forkless
    /// save holds it): nothing was changed.
    pub const KEY_BUSY: CommandError = CommandError::Message(
        c"ERR the key is busy (the server would not open it for writing); retry",
    );

    /// The reply's text, for tests.
    #[cfg(test)]
    pub fn text(self) -> &'static str {
        match self {
            CommandError::WrongArity => "ERR wrong number of arguments",
            CommandError::Syntax => "ERR syntax error",
            CommandError::Usage(what) => what.to_str().unwrap(),
            CommandError::Message(message) => message.to_str().unwrap(),
        }
    }
}

impl From<ParamError> for CommandError {
    fn from(error: ParamError) -> CommandError {
        CommandError::Message(error.message())
    }
}
