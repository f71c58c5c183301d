// A NestJS app module for the tests: one controller answering "hello" at /, and, when
// `throttling` is given, the throttler module with its `throttlers` on its `storage`, and its
// `guard` (ThrottlerGuard by default) as the app's guard. Plain JavaScript: the decorators
// are applied by hand, as TypeScript would.
"use strict";

require("reflect-metadata");
const { Controller, Get, Module } = require("@nestjs/common");
const { APP_GUARD } = require("@nestjs/core");
const { ThrottlerGuard, ThrottlerModule } = require("@nestjs/throttler");

function helloModule(throttling) {
  class HelloController {
    hello() {
      return "hello";
    }
  }
  Reflect.decorate(
    [Get()],
    HelloController.prototype,
    "hello",
    Object.getOwnPropertyDescriptor(HelloController.prototype, "hello"),
  );
  Reflect.decorate([Controller()], HelloController);
  class AppModule {}
  Reflect.decorate(
    [
      Module(
        throttling
          ? {
              imports: [ThrottlerModule.forRoot({ throttlers: throttling.throttlers, storage: throttling.storage })],
              controllers: [HelloController],
              providers: [{ provide: APP_GUARD, useClass: throttling.guard ?? ThrottlerGuard }],
            }
          : { controllers: [HelloController] },
      ),
    ],
    AppModule,
  );
  return AppModule;
}

module.exports = { helloModule };
