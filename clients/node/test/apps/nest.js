// A NestJS app module for the tests: one controller answering "hello" at /, the throttler
// module with `throttlers` on `storage`, and `guard` as the app's guard. Plain JavaScript:
// the decorators are applied by hand, as TypeScript would.
"use strict";

require("reflect-metadata");
const { Controller, Get, Module } = require("@nestjs/common");
const { APP_GUARD } = require("@nestjs/core");
const { ThrottlerGuard, ThrottlerModule } = require("@nestjs/throttler");

function helloModule({ storage, throttlers, guard = ThrottlerGuard }) {
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
      Module({
        imports: [ThrottlerModule.forRoot({ throttlers, storage })],
        controllers: [HelloController],
        providers: [{ provide: APP_GUARD, useClass: guard }],
      }),
    ],
    AppModule,
  );
  return AppModule;
}

module.exports = { helloModule };
