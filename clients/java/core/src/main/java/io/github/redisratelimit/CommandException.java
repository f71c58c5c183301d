package io.github.redisratelimit;

/**
 * The server answered a call with an error that says the call was wrong (an unknown command: the
 * module is not loaded; a wrong type: the key holds something else): the caller's, raised whatever
 * the failure policy.
 */
public class CommandException extends RateLimitException {
  public CommandException(String message, Throwable cause) {
    super(message, cause);
  }
}
