#!/bin/sh
# Spring Cloud Gateway's own RedisRateLimiter tests (spring-cloud-gateway-server, v4.3.0, the
# gateway of Spring Cloud 2025.0 that clients/java builds on) run against this package's drop-in:
# the test sources are copied unchanged from the checkout into a scratch Maven project whose
# gateway has redis-ratelimit-spring-cloud-gateway added, so that the `redisRateLimiter` bean they
# autowire is the module's. Their Redis, a Testcontainers container, is a real redis-server with
# the module: a stand-in for the two Testcontainers classes they name points them at it (no
# Docker here).
#
#   tests/peer/spring-cloud-gateway.sh <spring-cloud/spring-cloud-gateway checkout at v4.3.0>
#
# The checkout is not part of this repository: fetch it and give its path. Needs mvn,
# redis-server, the module built and the Java packages installed (`make java-clients`).
#
# On 2026-12-07, 12 of 12 passed; on 2026-12-01, 11 of 12 (clients/java/README.md, Tests, says
# which one fails now and then, and why).
# Run: RedisRateLimiterTests (the limit enforced through the drop-in, its headers, a zero burst),
# RedisRateLimiterConfigTests and RedisRateLimiterDefaultFilterConfigTests (the configuration read
# from the routes and the default filters). Not run: RedisRateLimiterLuaScriptTests (the script
# itself, which the drop-in does not run) and RedisRateLimiterUnitTests (SCG's class over a mocked
# template).
set -eu
[ $# -eq 1 ] || { sed -n '2,14p' "$0"; exit 2; }
peer=$(cd "$1" && pwd)
. "$(dirname "$0")/server.sh"
start_server
tests=$peer/spring-cloud-gateway-server/src/test
version=$(sed -n 's/^  <version>\(.*\)<\/version>/\1/p' "$root/clients/java/pom.xml" | head -n 1)
boot=$(sed -n 's/.*<spring-boot.version>\(.*\)<\/spring-boot.version>/\1/p' "$root/clients/java/pom.xml")
cloud=$(sed -n 's/.*<spring-cloud.version>\(.*\)<\/spring-cloud.version>/\1/p' "$root/clients/java/pom.xml")

java=$work/src/test/java
resources=$work/src/test/resources
mkdir -p "$java" "$resources" "$java/org/testcontainers/containers" "$java/org/testcontainers/junit/jupiter"
for class in filter/ratelimit/RedisRateLimiterTests filter/ratelimit/RedisRateLimiterConfigTests \
    filter/ratelimit/RedisRateLimiterDefaultFilterConfigTests test/BaseWebClientTests \
    test/HttpBinCompatibleController test/PermitAllSecurityConfiguration; do
    mkdir -p "$java/org/springframework/cloud/gateway/$(dirname "$class")"
    cp "$tests/java/org/springframework/cloud/gateway/$class.java" \
        "$java/org/springframework/cloud/gateway/$class.java"
done
# The profiles the configuration tests activate; test.uri, which their routes name, from the
# suite's application.yml (whose other routes need beans of tests not run here).
cp "$tests/resources/application-redis-rate-limiter-config.yml" \
    "$tests/resources/application-redis-rate-limiter-default-config.yml" "$resources/"
printf 'test:\n  uri: lb://testservice\n' > "$resources/application.yml"

cat > "$java/org/testcontainers/containers/GenericContainer.java" <<JAVA
package org.testcontainers.containers;

/** Stands in for Testcontainers' container: the redis-server with the module on port $port. */
public class GenericContainer<SELF extends GenericContainer<SELF>> {
  public GenericContainer(String image) {}

  @SuppressWarnings("unchecked")
  public SELF withExposedPorts(Integer... ports) {
    return (SELF) this;
  }

  public String getHost() {
    return "127.0.0.1";
  }

  public String getContainerIpAddress() {
    return getHost();
  }

  public Integer getFirstMappedPort() {
    return $port;
  }
}
JAVA
cat > "$java/org/testcontainers/junit/jupiter/Container.java" <<'JAVA'
package org.testcontainers.junit.jupiter;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/** Stands in for Testcontainers' annotation: the server is already running. */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.FIELD)
public @interface Container {}
JAVA
cat > "$java/org/testcontainers/junit/jupiter/Testcontainers.java" <<'JAVA'
package org.testcontainers.junit.jupiter;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/** Stands in for Testcontainers' annotation: the server is already running. */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.TYPE)
public @interface Testcontainers {}
JAVA

cat > "$work/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>peer</groupId>
  <artifactId>spring-cloud-gateway-redis-rate-limiter-tests</artifactId>
  <version>0</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.springframework.boot</groupId>
        <artifactId>spring-boot-dependencies</artifactId>
        <version>$boot</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
      <dependency>
        <groupId>org.springframework.cloud</groupId>
        <artifactId>spring-cloud-dependencies</artifactId>
        <version>$cloud</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.github.redisratelimit</groupId>
      <artifactId>redis-ratelimit-spring-cloud-gateway</artifactId>
      <version>$version</version>
    </dependency>
    <dependency>
      <groupId>org.springframework.cloud</groupId>
      <artifactId>spring-cloud-starter-gateway-server-webflux</artifactId>
    </dependency>
    <dependency>
      <groupId>org.springframework.boot</groupId>
      <artifactId>spring-boot-starter-data-redis-reactive</artifactId>
    </dependency>
    <dependency>
      <groupId>org.springframework.cloud</groupId>
      <artifactId>spring-cloud-starter-loadbalancer</artifactId>
    </dependency>
    <dependency>
      <groupId>org.springframework.boot</groupId>
      <artifactId>spring-boot-starter-security</artifactId>
    </dependency>
    <dependency>
      <groupId>org.springframework.boot</groupId>
      <artifactId>spring-boot-starter-test</artifactId>
      <scope>test</scope>
    </dependency>
    <dependency>
      <groupId>org.junit.vintage</groupId>
      <artifactId>junit-vintage-engine</artifactId>
      <scope>test</scope>
    </dependency>
    <dependency>
      <groupId>org.junit-pioneer</groupId>
      <artifactId>junit-pioneer</artifactId>
      <version>2.3.0</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.14.0</version>
        <configuration>
          <release>17</release>
        </configuration>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-surefire-plugin</artifactId>
        <version>3.5.4</version>
      </plugin>
    </plugins>
  </build>
</project>
POM
cd "$work"
status=0
mvn -B -q test -Dsurefire.printSummary=true > "$work/mvn.log" 2>&1 || status=$?
grep -h -E '^(Tests run|\[ERROR\] (Tests run|Failures|  ))' "$work/mvn.log" || true
for report in "$work"/target/surefire-reports/*.txt; do
    [ -e "$report" ] && sed -n '1,4p' "$report"
done
[ "$status" -eq 0 ] || { grep -h -A3 "Caused by" "$work"/target/surefire-reports/*.txt | sort -u | head -n 20; exit "$status"; }
# That the drop-in decided: the module's command was called, no script was.
redis-cli -p "$port" info commandstats | grep -E 'cmdstat_(cl\.throttle|evalsha|eval):' || true
