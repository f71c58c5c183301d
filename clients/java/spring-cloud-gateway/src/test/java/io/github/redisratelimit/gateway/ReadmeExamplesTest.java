package io.github.redisratelimit.gateway;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;

/**
 * Every Java example of clients/java/README.md compiles as it is, pasted into a file of its own
 * against the three packages and what they name (Lettuce, Jedis, Micrometer, Spring, the gateway):
 * each block is a whole class, imports and all.
 */
class ReadmeExamplesTest {
  @Test
  void everyJavaExampleOfTheReadmeCompiles() throws IOException {
    String readme = Files.readString(Path.of("../README.md"));
    Matcher blocks = Pattern.compile("```java\\n(.*?)```", Pattern.DOTALL).matcher(readme);
    List<JavaFileObject> sources = new ArrayList<>();
    while (blocks.find()) {
      String code = blocks.group(1);
      Matcher name = Pattern.compile("public class (\\w+)").matcher(code);
      assertTrue(name.find(), "an example is a whole public class:\n" + code);
      sources.add(
          new SimpleJavaFileObject(
              URI.create("string:///" + name.group(1) + ".java"), JavaFileObject.Kind.SOURCE) {
            @Override
            public CharSequence getCharContent(boolean ignoreEncodingErrors) {
              return code;
            }
          });
    }
    assertTrue(sources.size() >= 6, "the README's Java examples: " + sources.size());
    JavaCompiler compiler = ToolProvider.getSystemJavaCompiler();
    DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
    Path out = Files.createTempDirectory("readme-examples");
    String classpath =
        System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
    boolean compiled =
        compiler
            .getTask(
                null,
                null,
                diagnostics,
                List.of(
                    "-classpath",
                    classpath,
                    "-d",
                    out.toString(),
                    "-Xlint:all",
                    "-Werror",
                    "-proc:none"),
                null,
                sources)
            .call();
    assertEquals(List.of(), diagnostics.getDiagnostics().stream().map(Object::toString).toList());
    assertTrue(compiled);
  }
}
