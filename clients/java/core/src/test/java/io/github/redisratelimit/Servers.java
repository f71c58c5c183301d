package io.github.redisratelimit;

import io.lettuce.core.RedisClient;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.function.Function;
import redis.clients.jedis.JedisPool;

/**
 * The live server the tests run against ({@code REDIS_URL}, the module loaded: tests/clients.rs
 * starts it), and the drivers' calls on it.
 */
public final class Servers {
  private Servers() {}

  public static String url() {
    String url = System.getenv("REDIS_URL");
    if (url == null) {
      throw new IllegalStateException(
          "REDIS_URL names the server with the module (make test sets it)");
    }
    return url;
  }

  public static URI uri() {
    return URI.create(url());
  }

  /** A key of its own for one test. */
  static String unique(String name) {
    return "java:" + name + ":" + UUID.randomUUID();
  }

  /** Each driver's calls, by name: each test runs on both. */
  static List<Driver> drivers() {
    return List.of(
        new Driver("lettuce", uri -> LettuceCalls.connect(RedisClient.create(uri.toString()))),
        new Driver("jedis", uri -> JedisCalls.of(new JedisPool(uri.getHost(), uri.getPort()))));
  }

  /** A driver: makes calls to a server. */
  record Driver(String name, Function<URI, RedisCalls> calls) {
    RedisCalls on(URI uri) {
      return calls.apply(uri);
    }

    RedisCalls onServer() {
      return calls.apply(uri());
    }

    @Override
    public String toString() {
      return name;
    }
  }

  /**
   * A proxy in front of the server that can freeze: while frozen it reads nothing and sends
   * nothing, as a stopped ({@code SIGSTOP}) or partitioned server looks to its clients; thawed,
   * what waited goes through. Each connection is two threads copying bytes.
   */
  public static final class FrozenProxy implements AutoCloseable {
    private final ServerSocket socket;
    private final List<Socket> open = new ArrayList<>();
    private final Object gate = new Object();
    private volatile boolean frozen;

    /** A proxy in front of the tests' server ({@link Servers#uri()}), for a static field. */
    public static FrozenProxy inFront() {
      try {
        return new FrozenProxy(Servers.uri());
      } catch (IOException failed) {
        throw new java.io.UncheckedIOException(failed);
      }
    }

    public FrozenProxy(URI server) throws IOException {
      socket = new ServerSocket(0, 64, java.net.InetAddress.getLoopbackAddress());
      Thread acceptor =
          new Thread(
              () -> {
                while (!socket.isClosed()) {
                  try {
                    Socket client = socket.accept();
                    Socket upstream = new Socket(server.getHost(), server.getPort());
                    synchronized (open) {
                      open.add(client);
                      open.add(upstream);
                    }
                    copy(client, upstream);
                    copy(upstream, client);
                  } catch (IOException closed) {
                    return;
                  }
                }
              },
              "proxy");
      acceptor.setDaemon(true);
      acceptor.start();
    }

    private void copy(Socket from, Socket to) {
      Thread thread =
          new Thread(
              () -> {
                byte[] buffer = new byte[8192];
                try {
                  var in = from.getInputStream();
                  var out = to.getOutputStream();
                  while (true) {
                    int read = in.read(buffer);
                    if (read < 0) {
                      break;
                    }
                    synchronized (gate) {
                      while (frozen) {
                        gate.wait();
                      }
                    }
                    out.write(buffer, 0, read);
                    out.flush();
                  }
                } catch (IOException | InterruptedException closed) {
                  // the connection ended
                }
                try {
                  from.close();
                  to.close();
                } catch (IOException ignored) {
                  // closing anyway
                }
              },
              "proxy-copy");
      thread.setDaemon(true);
      thread.start();
    }

    public URI uri() {
      return URI.create("redis://127.0.0.1:" + socket.getLocalPort());
    }

    public void freeze() {
      frozen = true;
    }

    public void thaw() {
      synchronized (gate) {
        frozen = false;
        gate.notifyAll();
      }
    }

    @Override
    public void close() throws IOException {
      thaw();
      socket.close();
      synchronized (open) {
        for (Socket one : open) {
          one.close();
        }
      }
    }
  }
}
