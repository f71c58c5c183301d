//! Command registration: every command from one description ([`Command`], one entry of the
//! crate's command table), then everything `COMMAND INFO` and `COMMAND DOCS` show (arity, key
//! specs, summary, arguments for redis-cli's hints) where the server supports it (Redis
//! 7.0+), and ACL categories (Redis 7.2+, and the module's own `@ratelimit` category on
//! 7.4+). Older servers get the command without what they lack.

use std::ffi::{c_int, CStr, CString};
use std::mem::size_of;
use std::ptr;
use std::sync::{Mutex, OnceLock};

use redis_module::raw;

use crate::error::CommandError;
use crate::redis::api::{self, CommandArg, CommandFunc, CommandInfo, CommandKeySpec, Ctx};
use crate::redis::call::{Invocation, Reply};

/// A command's body: what it replies to a call in a mode, or the error.
pub type Body = fn(&Invocation, Mode) -> Result<Reply, CommandError>;

/// Whether a call may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A writing command: stores and propagates what it decides.
    Write,
    /// A `_RO` variant: the same decision, never stored.
    ReadOnly,
}

/// The key-spec flags of a key a command reads and may rewrite.
pub const KEY_READ_WRITE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE;

/// The key-spec flags of a key a command only reads.
pub const KEY_READ_ONLY: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;

/// The key-spec flags of a key a command fills (the AOF's chunks).
pub const KEY_INSERT: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT;

/// The most commands a table may hold: one callback function is made for each
/// ([`crate::redis::handler::callbacks`]) and one set of counters.
pub const MAX_COMMANDS: usize = 32;

/// Everything the server is told about one command, and what runs it: one entry of the
/// command table. Made by one of the constructors ([`Command::limiter`],
/// [`Command::reader`], [`Command::internal`], [`Command::admin`]) and refined by the
/// builder methods, all `const`, so that the table is a `static`.
#[derive(Clone, Copy)]
pub struct Command {
    /// The command's name.
    pub name: &'static CStr,
    /// What it runs.
    pub body: Body,
    /// Whether it may write.
    pub mode: Mode,
    /// Its flags, as `RedisModule_CreateCommand` takes them.
    pub flags: &'static CStr,
    /// ACL categories (`COMMAND INFO`, `ACL CAT`) as `RedisModule_SetCommandACLCategories`
    /// takes them, without the module's own category.
    pub acl_categories: &'static CStr,
    /// Whether the command belongs to the module's `@ratelimit` ACL category: the commands
    /// limiter clients call do, the internal, admin and debug ones do not.
    pub in_module_category: bool,
    /// Redis' arity: `-N` for at least N arguments, counting the name.
    pub arity: c_int,
    /// Where its keys are, and how it uses them.
    pub keys: Keys,
    /// The arguments after the name, for `COMMAND DOCS` and redis-cli's hints.
    pub args: &'static [Arg],
    /// One line for `COMMAND DOCS`.
    pub summary: &'static CStr,
    /// Time complexity for `COMMAND DOCS`.
    pub complexity: &'static CStr,
    /// The module version that introduced the command.
    pub since: &'static CStr,
    /// The keyspace event its writes fire (`notify-keyspace-events`): the name of the
    /// command clients call, also for the internal commands that carry its effect.
    pub event: &'static CStr,
    /// Whether `INFO ratelimit` counts its calls (the commands limiter clients call).
    pub counted: bool,
    /// Whether it is registered only with the module argument `debug-commands` (fault
    /// injection for the tests).
    pub debug: bool,
}

impl Command {
    /// The fields every constructor fills the same way.
    const fn base(name: &'static CStr, body: Body, mode: Mode) -> Command {
        Command {
            name,
            body,
            mode,
            flags: c"write fast",
            acl_categories: c"write fast",
            in_module_category: false,
            arity: -2,
            keys: Keys::One(KEY_READ_WRITE),
            args: &[],
            summary: c"",
            complexity: c"O(1)",
            since: c"0.1.0",
            event: name,
            counted: false,
            debug: false,
        }
    }

    /// A limiter command clients call, writing or its read-only `_RO` variant, on one key,
    /// counted in `INFO` and in the `@ratelimit` category.
    ///
    /// Not `deny-oom`: the module refuses only the calls that would write (see
    /// `store::writable`), so that peeks answer over `maxmemory`.
    pub const fn limiter(name: &'static CStr, mode: Mode, body: Body) -> Command {
        let (flags, acl_categories, key_flags) = match mode {
            Mode::Write => (c"write fast", c"write fast", KEY_READ_WRITE),
            Mode::ReadOnly => (c"readonly fast", c"read fast", KEY_READ_ONLY),
        };
        Command {
            flags,
            acl_categories,
            in_module_category: true,
            keys: Keys::One(key_flags),
            counted: true,
            ..Command::base(name, body, mode)
        }
    }

    /// A command clients call that reads one key and writes nothing, not counted.
    pub const fn reader(name: &'static CStr, body: Body) -> Command {
        Command {
            flags: c"readonly fast",
            acl_categories: c"read fast",
            in_module_category: true,
            keys: Keys::One(KEY_READ_ONLY),
            ..Command::base(name, body, Mode::ReadOnly)
        }
    }

    /// An internal command that carries a write's effect to one key, from a master or the
    /// AOF only; its writes fire `event`, the keyspace event of the command clients call.
    pub const fn internal(name: &'static CStr, body: Body, event: &'static CStr) -> Command {
        Command {
            event,
            ..Command::base(name, body, Mode::Write)
        }
    }

    /// A command for operators only: `admin` (and so in `@admin` and `@dangerous`), no
    /// keys, never in `@ratelimit`.
    pub const fn admin(name: &'static CStr, body: Body) -> Command {
        Command {
            flags: c"admin",
            acl_categories: c"admin dangerous slow",
            keys: Keys::None,
            ..Command::base(name, body, Mode::Write)
        }
    }

    /// The same command with `numkeys key [key ...]` keys, told to the server per call
    /// (`getkeys-api`): the key spec alone is not what Cluster routing and `CROSSSLOT`
    /// checks read.
    pub const fn counted_keys(self) -> Command {
        let (flags, key_flags) = match self.mode {
            Mode::Write => (c"write fast getkeys-api", KEY_READ_WRITE),
            Mode::ReadOnly => (c"readonly fast getkeys-api", KEY_READ_ONLY),
        };
        Command {
            flags,
            keys: Keys::Counted(key_flags),
            ..self
        }
    }

    /// The same command with other flags and ACL categories.
    pub const fn flags(self, flags: &'static CStr, acl_categories: &'static CStr) -> Command {
        Command {
            flags,
            acl_categories,
            ..self
        }
    }

    /// The same command with no keys (it reads the module's own state).
    pub const fn no_keys(self) -> Command {
        Command {
            keys: Keys::None,
            ..self
        }
    }

    /// The same command with its one key's flags.
    pub const fn key_flags(self, flags: u32) -> Command {
        Command {
            keys: Keys::One(flags),
            ..self
        }
    }

    /// The same command, with Redis' arity: `-N` for at least N arguments, counting the name.
    pub const fn arity(self, arity: c_int) -> Command {
        Command { arity, ..self }
    }

    /// The same command, with its arguments for `COMMAND DOCS`.
    pub const fn args(self, args: &'static [Arg]) -> Command {
        Command { args, ..self }
    }

    /// The same command, with its documentation: one line, its complexity, the version
    /// that introduced it.
    pub const fn docs(
        self,
        summary: &'static CStr,
        complexity: &'static CStr,
        since: &'static CStr,
    ) -> Command {
        Command {
            summary,
            complexity,
            since,
            ..self
        }
    }

    /// The same command, not counted in `INFO`.
    pub const fn not_counted(self) -> Command {
        Command {
            counted: false,
            ..self
        }
    }

    /// The same command, registered only with the module argument `debug-commands`.
    pub const fn debug(self) -> Command {
        Command {
            debug: true,
            in_module_category: false,
            ..self
        }
    }

    /// The fewest arguments a call has, counting the name: Redis' arity, positive when exact,
    /// negative for "at least".
    pub fn min_arguments(&self) -> usize {
        self.arity.unsigned_abs() as usize
    }
}

/// Where a command's keys are, with their key-spec flags (`REDISMODULE_CMD_KEY_*`).
#[derive(Clone, Copy)]
pub enum Keys {
    /// No key: the command reads the module's own state (`RL.TOP`).
    None,
    /// One key, the first argument.
    One(u32),
    /// `numkeys key [key ...]`: the first argument counts the keys that follow it.
    Counted(u32),
}

/// One argument in `COMMAND DOCS`.
#[derive(Clone, Copy)]
pub struct Arg {
    /// Its name.
    pub name: &'static CStr,
    /// Its type.
    pub kind: ArgKind,
    /// The keyword that introduces it, or for a pure token, the token itself.
    pub token: Option<&'static CStr>,
    /// Whether it may be left out.
    pub optional: bool,
    /// Whether it may be repeated.
    pub multiple: bool,
    /// For a one-of or a block, its alternatives or parts.
    pub subargs: &'static [Arg],
}

impl Arg {
    /// A required argument.
    pub const fn new(name: &'static CStr, kind: ArgKind) -> Arg {
        Arg {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
            subargs: &[],
        }
    }

    /// A keyword standing alone, named after itself.
    pub const fn token(token: &'static CStr) -> Arg {
        Arg {
            token: Some(token),
            ..Arg::new(token, ArgKind::PureToken)
        }
    }

    /// The same argument, introduced by the keyword `token`.
    pub const fn after_token(self, token: &'static CStr) -> Arg {
        Arg {
            token: Some(token),
            ..self
        }
    }

    /// Exactly one of `alternatives`.
    pub const fn one_of(name: &'static CStr, alternatives: &'static [Arg]) -> Arg {
        Arg {
            subargs: alternatives,
            ..Arg::new(name, ArgKind::OneOf)
        }
    }

    /// Its parts, in order.
    pub const fn block(name: &'static CStr, parts: &'static [Arg]) -> Arg {
        Arg {
            subargs: parts,
            ..Arg::new(name, ArgKind::Block)
        }
    }

    /// The same argument, which may be repeated.
    pub const fn multiple(self) -> Arg {
        Arg {
            multiple: true,
            ..self
        }
    }

    /// The same argument, optional.
    pub const fn optional(self) -> Arg {
        Arg {
            optional: true,
            ..self
        }
    }
}

/// The argument types this module's commands use.
#[derive(Clone, Copy)]
pub enum ArgKind {
    /// The key.
    Key,
    /// An integer.
    Integer,
    /// A string.
    String,
    /// A keyword standing alone.
    PureToken,
    /// Exactly one of the subarguments.
    OneOf,
    /// The subarguments, in order.
    Block,
}

/// Describes the version of the structures below to the server, which reads them through
/// these sizes: newer headers may have grown them.
static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<CommandKeySpec>(),
    sizeof_arg: size_of::<CommandArg>(),
};

/// The ACL category the module adds for its commands (`+@ratelimit`), on servers that let
/// modules add categories (Redis 7.4+).
pub const MODULE_ACL_CATEGORY: &CStr = c"ratelimit";

/// Adds [`MODULE_ACL_CATEGORY`] to the server's ACL categories; false when the server cannot
/// (before Redis 7.4) or refuses.
pub fn add_module_acl_category(ctx: Ctx<'_>) -> bool {
    api::add_acl_category(ctx, MODULE_ACL_CATEGORY)
}

/// Registers `command`, run by `handler`: a single key at positions 1 1 1; counted keys are
/// declared by their key spec only (Redis then finds them per call, as for `EVAL`).
pub fn register(ctx: Ctx<'_>, command: &Command, handler: CommandFunc) -> Result<(), String> {
    let keys = match command.keys {
        Keys::One(_) => (1, 1, 1),
        Keys::None | Keys::Counted(_) => (0, 0, 0),
    };
    if !api::create_command(ctx, command.name, handler, command.flags, keys) {
        return Err(format!(
            "the server refused to create the command {} (is another module using the name?)",
            command.name.to_string_lossy()
        ));
    }
    Ok(())
}

/// Gives a registered command its metadata: arity, key spec, documentation, and ACL
/// categories (with the module's own when `module_category` says the server has it).
/// Servers before Redis 7.0 have no API for it and keep the bare command.
pub fn describe(ctx: Ctx<'_>, spec: &Command, module_category: bool) -> Result<(), &'static str> {
    if !api::can_describe_commands() {
        return Ok(());
    }
    let Some(command) = api::get_command(ctx, spec.name) else {
        return Err("a registered command could not be found to describe it");
    };
    set_acl_categories(command, spec, module_category)?;
    // SAFETY: an all-zero key spec (null pointers, zero flags) is the terminator the server
    // looks for.
    let terminator = unsafe { std::mem::zeroed() };
    // SAFETY: as the terminator above; a command without keys has only the terminator.
    let mut key_specs = [
        key_spec(spec.keys).unwrap_or(unsafe { std::mem::zeroed() }),
        terminator,
    ];
    let mut args = c_args(spec.args);
    let info = CommandInfo {
        version: &INFO_VERSION,
        summary: spec.summary.as_ptr(),
        complexity: spec.complexity.as_ptr(),
        since: spec.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: spec.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: args.args.as_mut_ptr(),
    };
    // SAFETY: every pointer in `info` is a static C string or a terminated array alive for
    // the call; the server copies everything it keeps before returning.
    if !unsafe { api::set_command_info(command, &info) } {
        return Err(
            "the server refused a command's metadata (COMMAND INFO and COMMAND DOCS will lack it)",
        );
    }
    Ok(())
}

/// Puts the command in its ACL categories, on servers that have them for module commands
/// (Redis 7.2+; before, module commands belong to no category but `@all`).
fn set_acl_categories(
    command: api::CommandHandle<'_>,
    spec: &Command,
    module_category: bool,
) -> Result<(), &'static str> {
    let mut categories = spec.acl_categories.to_bytes().to_vec();
    if module_category && spec.in_module_category {
        categories.push(b' ');
        categories.extend_from_slice(MODULE_ACL_CATEGORY.to_bytes());
    }
    let categories = CString::new(categories).expect("category names hold no NUL");
    match api::set_command_acl_categories(command, &categories) {
        Some(false) => Err("the server refused a command's ACL categories"),
        Some(true) | None => Ok(()),
    }
}

/// The key spec: a single key found at index 1, a range of one; or counted keys, whose
/// number is at index 1 and which follow it (like `EVAL`'s); none for a command without keys.
fn key_spec(keys: Keys) -> Option<CommandKeySpec> {
    let (flags, find_keys_type, fk) = match keys {
        Keys::None => return None,
        Keys::One(flags) => (
            flags,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
        Keys::Counted(flags) => (
            flags,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        ),
    };
    Some(CommandKeySpec {
        notes: ptr::null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type,
        fk,
    })
}

/// A zero-terminated C argument array, with the arrays its subarguments point into.
struct CArgs {
    args: Vec<CommandArg>,
    _nested: Vec<CArgs>,
}

/// `args` as the zero-terminated C array `RedisModuleCommandInfo` takes.
fn c_args(args: &[Arg]) -> CArgs {
    let mut nested = Vec::new();
    let mut converted = Vec::with_capacity(args.len() + 1);
    for arg in args {
        let subargs = if arg.subargs.is_empty() {
            ptr::null_mut()
        } else {
            let mut subargs = c_args(arg.subargs);
            let first = subargs.args.as_mut_ptr();
            nested.push(subargs); // Moves the Vec, not the elements `first` points to.
            first
        };
        converted.push(CommandArg {
            name: arg.name.as_ptr(),
            type_: match arg.kind {
                ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                ArgKind::PureToken => {
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN
                }
                ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                ArgKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
            },
            key_spec_index: if matches!(arg.kind, ArgKind::Key) {
                0
            } else {
                -1
            },
            token: arg.token.map_or(ptr::null(), CStr::as_ptr),
            summary: ptr::null(),
            since: ptr::null(),
            flags: (if arg.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL
            } else {
                raw::REDISMODULE_CMD_ARG_NONE
            } | if arg.multiple {
                raw::REDISMODULE_CMD_ARG_MULTIPLE
            } else {
                raw::REDISMODULE_CMD_ARG_NONE
            }) as c_int,
            deprecated_since: ptr::null(),
            subargs,
            display_text: ptr::null(),
        });
    }
    // SAFETY: all-zero (a null name) is the terminator Redis looks for.
    converted.push(unsafe { std::mem::zeroed() });
    CArgs {
        args: converted,
        _nested: nested,
    }
}

impl Command {
    /// Its usage line, `NAME args`, the arguments as `COMMAND DOCS` gives them.
    pub fn usage_line(&self) -> String {
        let name = self.name.to_string_lossy().to_uppercase();
        match usage(self.args) {
            args if args.is_empty() => name,
            args => format!("{name} {args}"),
        }
    }

    /// Its syntax error (`CommandError::Syntax`): `ERR syntax error. Usage: NAME args`,
    /// rendered once per command (entry `index` of the table) on the first malformed call.
    pub fn syntax_error(&self, index: usize) -> &'static CStr {
        static USAGES: [OnceLock<CString>; MAX_COMMANDS] =
            [const { OnceLock::new() }; MAX_COMMANDS];
        USAGES[index]
            .get_or_init(|| rendered(format!("ERR syntax error. Usage: {}", self.usage_line())))
    }

    /// A syntax error that says what was wrong (`CommandError::Usage(what)`): `ERR what.
    /// Usage: NAME args`, rendered once per command and `what` (a command has a few) and kept.
    pub fn usage_error(&self, index: usize, what: &'static CStr) -> &'static CStr {
        static RENDERED: Mutex<Vec<(usize, usize, &'static CStr)>> = Mutex::new(Vec::new());
        let mut rendered_ones = RENDERED.lock().unwrap_or_else(|held| held.into_inner());
        let id = what.as_ptr() as usize;
        if let Some(&(_, _, message)) = rendered_ones
            .iter()
            .find(|one| one.0 == index && one.1 == id)
        {
            return message;
        }
        let line = format!(
            "ERR {}. Usage: {}",
            what.to_string_lossy(),
            self.usage_line()
        );
        let message: &'static CStr = Box::leak(rendered(line).into_boxed_c_str());
        rendered_ones.push((index, id, message));
        message
    }
}

/// A rendered message as a C string (a usage line holds no NUL).
fn rendered(line: String) -> CString {
    CString::new(line).unwrap_or_default()
}

/// The usage of the block among `args` (at any depth) that begins with the keyword `token`,
/// without it: what follows the keyword, as `THROTTLE`'s `max_burst count period [WARMUP
/// period]` in `RL.ALL`.
pub fn block_usage(args: &[Arg], token: &CStr) -> Option<String> {
    args.iter().find_map(|arg| match arg.subargs.split_first() {
        Some((first, rest)) if matches!(arg.kind, ArgKind::Block) && first.token == Some(token) => {
            Some(usage(rest))
        }
        _ => block_usage(arg.subargs, token),
    })
}

/// The keywords the blocks of the alternatives named `name` begin with, in order.
pub fn block_keywords(args: &[Arg], name: &CStr) -> Vec<&'static CStr> {
    args.iter()
        .find(|arg| matches!(arg.kind, ArgKind::OneOf) && arg.name == name)
        .map(|arg| {
            arg.subargs
                .iter()
                .filter_map(|block| block.subargs.first()?.token)
                .collect()
        })
        .unwrap_or_default()
}

/// `args` as a usage line: optional parts in brackets, alternatives joined by `|` (` | `
/// between blocks), a keyword before its value, a repeated part followed by `[... ...]`.
pub fn usage(args: &[Arg]) -> String {
    let words: Vec<String> = args.iter().map(usage_of).collect();
    words.join(" ")
}

fn usage_of(arg: &Arg) -> String {
    let name = arg.name.to_string_lossy();
    let token = arg.token.map(CStr::to_string_lossy);
    let mut text = match (arg.kind, token) {
        (ArgKind::PureToken, Some(token)) => token.into_owned(),
        (ArgKind::OneOf, _) => {
            let blocks = arg
                .subargs
                .iter()
                .any(|sub| matches!(sub.kind, ArgKind::Block));
            let parts: Vec<String> = arg.subargs.iter().map(usage_of).collect();
            parts.join(if blocks { " | " } else { "|" })
        }
        (ArgKind::Block, _) => usage(arg.subargs),
        (_, Some(token)) => format!("{token} {name}"),
        (_, None) => name.into_owned(),
    };
    if arg.multiple {
        text = match arg.kind {
            ArgKind::OneOf => format!("{text} [...]"),
            _ => format!("{text} [{text} ...]"),
        };
    }
    if arg.optional {
        text = format!("[{text}]");
    }
    text
}
